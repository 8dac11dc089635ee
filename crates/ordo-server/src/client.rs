//! A small blocking HTTP/JSON client for the server's API, used by the CLI and the agent.
//! Errors keep the server's status code and message.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error status.
    #[error("server answered {status}: {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server could not be reached.
    #[error("cannot reach the server at {url}: {message}")]
    Transport {
        /// URL.
        url: String,
        /// Cause.
        message: String,
    },
    /// The TLS settings could not be used (a bad CA file).
    #[error("TLS: {message}")]
    Tls {
        /// What is wrong.
        message: String,
    },
    /// The answer was not what the API documents.
    #[error("unexpected answer from {url}: {message}")]
    Decode {
        /// URL.
        url: String,
        /// Cause.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status, for errors the server sent.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one server with one token.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// A client for `base` (e.g. `http://127.0.0.1:7700`) with requests timing out after `timeout`.
    /// An `https://` base is verified against the system's root certificates.
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> Client {
        let config = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build();
        Client { base: base.trim_end_matches('/').to_string(), token, agent: config.into() }
    }

    /// Like [`Client::new`], but an `https://` server must present a certificate signed by one
    /// of the PEM certificates in `ca_pem` (a private CA, as `ordo server --tls-cert` uses).
    pub fn with_ca(
        base: &str,
        token: Option<String>,
        timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Client, ClientError> {
        let Some(pem) = ca_pem else { return Ok(Client::new(base, token, timeout)) };
        let bad = |message: String| ClientError::Tls { message };
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| bad(format!("CA file: {e}")))? {
                certs.push(c);
            }
        }
        if certs.is_empty() {
            return Err(bad("CA file: no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
        }
        let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&certs)).build();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .tls_config(tls)
            .build();
        Ok(Client { base: base.trim_end_matches('/').to_string(), token, agent: config.into() })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn finish<T: DeserializeOwned>(
        &self,
        url: &str,
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let text = self.text(url, r)?;
        serde_json::from_str(&text).map_err(|e| ClientError::Decode { url: url.to_string(), message: e.to_string() })
    }

    /// The body of a successful answer as text; an error answer as [`ClientError::Http`].
    fn text(&self, url: &str, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<String, ClientError> {
        let mut resp = r.map_err(|e| ClientError::Transport { url: url.to_string(), message: e.to_string() })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .map_err(|e| ClientError::Transport { url: url.to_string(), message: e.to_string() })?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_str::<crate::api::ErrorBody>(&text).map(|b| b.error).unwrap_or(text);
            return Err(ClientError::Http { status, message });
        }
        Ok(text)
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// `GET path`.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.get(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        self.finish(&url, req.call())
    }

    /// `GET path`, its answer as text (`/metrics`).
    pub fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.get(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        self.text(&url, req.call())
    }

    /// `POST path` with a JSON body.
    pub fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.post(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        self.finish(&url, req.send_json(body))
    }

    /// `PUT path` with a JSON body.
    pub fn put<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.put(&url);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        self.finish(&url, req.send_json(body))
    }
}
