//! The web dashboard's page, script and style, built into the binary (no CDN, no build step) and
//! served at `/` on the API's listener with a strict Content-Security-Policy; its data is the API's.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// The page may load only its own script and style and talk only to this server; nothing
/// inline runs, and no other site may frame it.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                       img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the page (it holds no data; the script fetches it with the token the user gives).
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /dashboard.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_small_and_self_contained() {
        let total = INDEX.len() + SCRIPT.len() + STYLE.len();
        assert!(total < 40_000, "{total} bytes");
        for (name, text) in [("index.html", INDEX), ("dashboard.js", SCRIPT), ("dashboard.css", STYLE)] {
            // Nothing fetched from elsewhere (the SVG namespace is a name, never fetched).
            let t = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!t.contains("http://") && !t.contains("https://") && !t.contains("//cdn"), "{name} names a URL");
        }
        // The script never turns server data into markup.
        for bad in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!SCRIPT.contains(bad), "dashboard.js uses {bad}");
        }
        // No inline script or style in the page (the CSP forbids them).
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="), "inline script or style");
        assert!(!SCRIPT.contains("localStorage"), "the token stays in the tab (sessionStorage)");
    }
}
