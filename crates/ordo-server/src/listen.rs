//! The listener: accepts connections (at most `max_connections` at once), speaks TLS when the
//! server has a certificate (rustls), closes a connection that does not send a request's
//! headers in time (no half-open connection holds a slot for long), and hands each request,
//! with its peer address, to the router.

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tower::ServiceExt;

/// A TLS server configuration from a PEM certificate chain and its PEM private key.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {}: no PEM certificate in it", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
    Ok(Arc::new(cfg))
}

/// How connections are served.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// TLS, when the server has a certificate.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A connection must send a request's headers (and finish a TLS handshake) within this.
    pub header_timeout: Duration,
    /// Most connections open at once; more are closed at once.
    pub max_connections: usize,
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, app: Router, opts: ListenOptions) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(opts.max_connections));
    let mut warned = false;
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin.
                eprintln!("ordo server: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !warned {
                eprintln!("ordo server: {} connections open (max_connections); closing new ones", opts.max_connections);
                warned = true;
            }
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (app, opts) = (app.clone(), opts.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(opts.header_timeout);
            match opts.tls {
                Some(cfg) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                    let Ok(Ok(stream)) = tokio::time::timeout(opts.header_timeout, acceptor.accept(tcp)).await else {
                        return;
                    };
                    let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                }
            }
        });
    }
}

/// The peer address of a request, when the listener recorded one.
pub fn peer_of(ext: &axum::http::Extensions) -> Option<SocketAddr> {
    ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}
