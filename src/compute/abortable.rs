//! HTTP transports that a lost claim interrupts (SPEC W2, W3): the socket under a driver's
//! request is shut down by the thread that cancels the pass.
//!
//! A driver request is bounded by the driver's request timeout, not by the lease: the
//! heartbeat renews the claim while the request runs. What ends it early is the pass's
//! cancellation. `AbortableConnector` wraps the connector that opens the socket (the Docker
//! driver's Unix socket, the Kubernetes client's TCP socket under TLS) and keeps the shutdown
//! handles that connector registers with ureq. Every blocking read or write of the transport,
//! the TLS handshake's included, registers those handles with the token current on the
//! calling thread (`CancelToken::enter`): a renewal refused, a lease run out or a worker
//! stopping shuts the socket down, and the request returns at once. A read also wakes when the
//! lease runs out without anybody noticing (a renewal stuck in the database): it waits at most
//! until the lease's deadline, then asks the token, and waits again if the lease was renewed.
//! Without a current token (preflight, `check`) the transport is the wrapped one, unchanged.
//!
//! It never reads or interprets what flows through it.

use crate::cancel::{self, AbortGuard, CancelToken};
use parking_lot::Mutex;
use std::io;
use std::sync::{Arc, Weak};
use std::time::Instant;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, ShutdownHandle, Transport,
};

/// The shutdown handles of one connection's sockets.
type Handles = Arc<Mutex<Vec<Weak<dyn ShutdownHandle>>>>;

/// Wraps the connector `C` that opens a socket; see the module doc.
#[derive(Debug)]
pub struct AbortableConnector<C>(pub C);

impl<C> Connector<()> for AbortableConnector<C>
where
    C: Connector<()>,
{
    type Out = AbortableTransport<C::Out>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let handles: Handles = Arc::default();
        let register = details.register_shutdown.clone();
        let kept = handles.clone();
        let wrapped = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: Arc::new(move |handle: Weak<dyn ShutdownHandle>| {
                kept.lock().push(handle.clone());
                register(handle)
            }),
        };
        if let Some(token) = cancel::current() {
            token.check().map_err(|c| aborted(&c.to_string()))?;
        }
        let inner = self.0.connect(&wrapped, chained)?;
        Ok(inner.map(|inner| AbortableTransport { inner, handles }))
    }
}

/// A transport whose blocking calls the current pass's cancellation interrupts.
#[derive(Debug)]
pub struct AbortableTransport<T> {
    inner: T,
    handles: Handles,
}

impl<T> AbortableTransport<T> {
    /// Registers this connection's shutdown with the current token for one blocking call.
    /// `Err` when that token is cancelled already.
    fn guard(&self, token: &CancelToken) -> Result<AbortGuard, ureq::Error> {
        let handles = Arc::downgrade(&self.handles);
        token
            .on_cancel(Arc::new(move || {
                let Some(handles) = handles.upgrade() else {
                    return;
                };
                for handle in handles.lock().iter().filter_map(Weak::upgrade) {
                    handle.shutdown();
                }
            }))
            .map_err(|c| aborted(&c.to_string()))
    }
}

/// The error of an I/O call interrupted (or refused) because the pass was cancelled; the
/// driver maps it to a cancellation by asking the token again.
fn aborted(what: &str) -> ureq::Error {
    ureq::Error::Io(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        what.to_string(),
    ))
}

impl<T: Transport> Transport for AbortableTransport<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let Some(token) = cancel::current() else {
            return self.inner.transmit_output(amount, timeout);
        };
        let _guard = self.guard(&token)?;
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let Some(token) = cancel::current() else {
            return self.inner.await_input(timeout);
        };
        let _guard = self.guard(&token)?;
        // The request's own budget, as an instant, so waits cut at the lease add up to it.
        let budget_end = match timeout.after {
            ureq::unversioned::transport::time::Duration::Exact(d) => Instant::now().checked_add(d),
            _ => None,
        };
        loop {
            let lease_left = token.remaining();
            if lease_left.is_zero() {
                // The lease ran out (or the token was cancelled): `remaining` cancelled it.
                return Err(aborted("pass cancelled"));
            }
            let budget_left = budget_end.map(|end| end.saturating_duration_since(Instant::now()));
            let cut = budget_left.is_none_or(|left| lease_left < left);
            let mut step = timeout;
            step.after = match budget_left {
                Some(left) if !cut => left.into(),
                _ => lease_left.into(),
            };
            match self.inner.await_input(step) {
                // Woken by the lease's deadline, not by the request's: ask the token again.
                Err(ureq::Error::Timeout(reason)) if cut && reason == timeout.reason => continue,
                result => return result,
            }
        }
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

/// An HTTPS client for a webhook the Installation names (lifecycle hooks, SPEC H2; the
/// repository sender, SPEC G20): verified against `ca_pem`'s certificates only, no proxy, no
/// redirects, every status an answer, and its calls interruptible by the pass's cancellation.
/// `None` when the bundle holds no certificate.
pub fn webhook_agent(ca_pem: &[u8]) -> Option<ureq::Agent> {
    use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
    use ureq::unversioned::resolver::DefaultResolver;
    use ureq::unversioned::transport::{RustlsConnector, TcpConnector};
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return None;
    }
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::new_with_certs(&certs))
        .build();
    let config = ureq::config::Config::builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .https_only(true)
        .tls_config(tls)
        .user_agent(concat!("occ-worker/", env!("CARGO_PKG_VERSION")))
        .max_idle_connections_per_host(4)
        .build();
    let connector = AbortableConnector(TcpConnector::default()).chain(RustlsConnector::default());
    Some(ureq::Agent::with_parts(
        config,
        connector,
        DefaultResolver::default(),
    ))
}
