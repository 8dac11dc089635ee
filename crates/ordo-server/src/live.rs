//! The HTTP handlers of the live views: agents' GPU activity, every GPU now, the utilisation
//! series, GPU-hours per user and group, who a token is, and `/metrics`.

use crate::api::*;
use crate::http::{AppState, Auth};
use crate::state::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::{header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ordo_core::policy::parse_duration;
use serde::Deserialize;

/// Longest span the series and usage views take (the hourly series keeps 15 days).
const MAX_SPAN_MS: i64 = 15 * 86_400_000;

/// `POST /v1/agent/activity`: a node's GPU samples (its own agent token only).
pub async fn activity(
    State(s): State<AppState>,
    Auth(who): Auth,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let rep: ActivityReport =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("malformed JSON body: {e}")))?;
    if rep.gpus.len() > MAX_ACTIVITY_GPUS {
        return Err(ApiError::BadRequest(format!("field `gpus`: more than {MAX_ACTIVITY_GPUS} samples")));
    }
    s.change_quiet(|c| c.activity(&who, &rep, now_ms())).await?;
    Ok(Json(serde_json::json!({"ok": true})))
}

/// `GET /v1/gpus`.
pub async fn gpus(State(s): State<AppState>, _: Auth) -> Json<GpusResponse> {
    Json(s.core().gpus_status(now_ms()))
}

#[derive(Debug, Deserialize)]
pub struct SpanQuery {
    span: Option<String>,
}

fn span(q: &SpanQuery) -> Result<i64, ApiError> {
    let text = q.span.as_deref().unwrap_or("1d");
    match parse_duration(text) {
        Some(ms) if (60_000..=MAX_SPAN_MS).contains(&ms) => Ok(ms),
        _ => Err(ApiError::BadRequest(format!(
            "query `span`: `{text}` is not a duration from 1m to 15d, such as 1d or 14d"
        ))),
    }
}

/// `GET /v1/utilization?span=1d`.
pub async fn utilization(
    State(s): State<AppState>,
    _: Auth,
    Query(q): Query<SpanQuery>,
) -> Result<Json<UtilizationResponse>, ApiError> {
    let span = span(&q)?;
    Ok(Json(s.core().utilization(span, now_ms())?))
}

/// `GET /v1/usage?span=14d` (read off the state lock).
pub async fn usage(
    State(s): State<AppState>,
    _: Auth,
    Query(q): Query<SpanQuery>,
) -> Result<Json<UsageResponse>, ApiError> {
    let span = span(&q)?;
    let reader = s.reader().clone();
    let now = now_ms();
    let u = tokio::task::spawn_blocking(move || reader.usage(now - span, now))
        .await
        .map_err(|e| ApiError::Conflict(format!("usage: {e}")))??;
    Ok(Json(u))
}

/// `GET /v1/whoami`.
pub async fn whoami(Auth(who): Auth) -> Json<WhoAmI> {
    Json(WhoAmI { user: who.user, role: who.role })
}

/// `GET /metrics`: Prometheus text; a valid token unless `metrics_public = true`.
pub async fn metrics(State(s): State<AppState>, mut parts: Parts) -> Result<Response, ApiError> {
    if !s.metrics_public() {
        Auth::from_request_parts(&mut parts, &s).await?;
    }
    let now = now_ms();
    let (snap, telemetry) = {
        let c = s.core();
        (c.snapshot(now), c.telemetry())
    };
    let reader = s.reader().clone();
    let outcomes = tokio::task::spawn_blocking(move || reader.outcomes())
        .await
        .map_err(|e| ApiError::Conflict(format!("metrics: {e}")))??;
    let body = crate::metrics::render(&snap, &outcomes, &telemetry);
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response())
}
