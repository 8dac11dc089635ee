//! The listener: accepts connections (at most `max_connections` at once, and at most
//! `max_connections_per_addr` from one address), speaks TLS when the server has a certificate
//! (rustls), closes a connection that does not send a request's headers in time, and hands each
//! request, with its peer address, to the router. At either limit, a new connection takes the
//! place of the oldest one that is not in the middle of a request (still sending its headers,
//! or idle between requests): a client that holds connections open without finishing its
//! requests cannot lock others out, since a real request's connection sends its headers at
//! once and is never the oldest idle one.

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
    key_is_private(key)?;
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

/// Refuses a private key that other users may read or that anyone but its owner and group may
/// change (as ssh does with its keys): 0600 or 0640 (a group such as `ssl-cert`) pass.
fn key_is_private(key: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(key).map_err(|e| format!("--tls-key {}: {e}", key.display()))?.permissions().mode();
    if mode & 0o027 != 0 {
        return Err(format!(
            "--tls-key {}: mode {:o} lets {} it; the private key must be readable by the server's account only: `chmod 600 {}`",
            key.display(),
            mode & 0o777,
            if mode & 0o007 != 0 { "every user on this machine read" } else { "its group change" },
            key.display()
        ));
    }
    Ok(())
}

/// How connections are served.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// TLS, when the server has a certificate.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A connection must send a request's headers (and finish a TLS handshake) within this.
    pub header_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one address.
    pub max_per_addr: usize,
}

/// One open connection, as the listener tracks it.
#[derive(Debug)]
struct Conn {
    ip: std::net::IpAddr,
    /// In the middle of a request (from its complete headers to its answer).
    busy: bool,
    /// Since when it is in its current state (accepted, or its last request began or ended).
    since: std::time::Instant,
    /// Tells its task to close it.
    evict: Arc<tokio::sync::Notify>,
}

/// The open connections, by id, and how many each address has.
#[derive(Debug, Default)]
struct Conns {
    next: u64,
    open: std::collections::HashMap<u64, Conn>,
    per_ip: std::collections::HashMap<std::net::IpAddr, usize>,
}

impl Conns {
    /// Makes room for a connection from `ip`, if needed by closing the oldest idle connection
    /// (of `ip` when `ip` is at its limit); `false` when every connection that would have to go
    /// is in the middle of a request.
    fn make_room(&mut self, ip: std::net::IpAddr, opts: &ListenOptions) -> bool {
        let ip_full = self.per_ip.get(&ip).copied().unwrap_or(0) >= opts.max_per_addr;
        if self.open.len() < opts.max_connections && !ip_full {
            return true;
        }
        let victim = self
            .open
            .iter()
            .filter(|(_, c)| !c.busy && (!ip_full || c.ip == ip))
            .min_by_key(|(_, c)| c.since)
            .map(|(&id, _)| id);
        match victim {
            Some(id) => {
                if let Some(c) = self.remove(id) {
                    c.evict.notify_one();
                }
                true
            }
            None => false,
        }
    }

    fn add(&mut self, ip: std::net::IpAddr) -> (u64, Arc<tokio::sync::Notify>) {
        self.next += 1;
        let evict = Arc::new(tokio::sync::Notify::new());
        self.open.insert(self.next, Conn { ip, busy: false, since: std::time::Instant::now(), evict: evict.clone() });
        *self.per_ip.entry(ip).or_default() += 1;
        (self.next, evict)
    }

    fn remove(&mut self, id: u64) -> Option<Conn> {
        let c = self.open.remove(&id)?;
        if let Some(n) = self.per_ip.get_mut(&c.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&c.ip);
            }
        }
        Some(c)
    }

    fn set_busy(&mut self, id: u64, busy: bool) {
        if let Some(c) = self.open.get_mut(&id) {
            c.busy = busy;
            c.since = std::time::Instant::now();
        }
    }
}

fn lock_conns(m: &std::sync::Mutex<Conns>) -> std::sync::MutexGuard<'_, Conns> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, app: Router, opts: ListenOptions) -> std::io::Result<()> {
    let conns = Arc::new(std::sync::Mutex::new(Conns::default()));
    let mut warned: Option<std::time::Instant> = None;
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
        let (id, evict) = {
            let mut t = lock_conns(&conns);
            let crowded = t.open.len() >= opts.max_connections
                || t.per_ip.get(&peer.ip()).copied().unwrap_or(0) >= opts.max_per_addr;
            let room = t.make_room(peer.ip(), &opts);
            if crowded && warned.is_none_or(|w| w.elapsed() > Duration::from_secs(60)) {
                eprintln!(
                    "ordo server: {} connections open ({} from {}; max_connections {}, max_connections_per_addr {}); {}",
                    t.open.len(),
                    t.per_ip.get(&peer.ip()).copied().unwrap_or(0),
                    peer.ip(),
                    opts.max_connections,
                    opts.max_per_addr,
                    if room {
                        "closing the oldest idle ones for new ones"
                    } else {
                        "every one is in a request: closing new ones"
                    }
                );
                warned = Some(std::time::Instant::now());
            }
            if !room {
                drop(tcp);
                continue;
            }
            t.add(peer.ip())
        };
        let _ = tcp.set_nodelay(true);
        let (app, opts, conns) = (app.clone(), opts.clone(), conns.clone());
        tokio::spawn(async move {
            let svc_conns = conns.clone();
            let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                let (app, conns) = (app.clone(), svc_conns.clone());
                async move {
                    lock_conns(&conns).set_busy(id, true);
                    let r = app.oneshot(req.map(axum::body::Body::new)).await;
                    lock_conns(&conns).set_busy(id, false);
                    r
                }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(opts.header_timeout);
            let served = async {
                match opts.tls {
                    Some(cfg) => {
                        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                        let Ok(Ok(stream)) = tokio::time::timeout(opts.header_timeout, acceptor.accept(tcp)).await
                        else {
                            return;
                        };
                        let _ = http.serve_connection(TokioIo::new(stream), svc).await;
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), svc).await;
                    }
                }
            };
            tokio::select! {
                _ = served => {}
                _ = evict.notified() => {}
            }
            lock_conns(&conns).remove(id);
        });
    }
}

/// The peer address of a request, when the listener recorded one.
pub fn peer_of(ext: &axum::http::Extensions) -> Option<SocketAddr> {
    ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}
