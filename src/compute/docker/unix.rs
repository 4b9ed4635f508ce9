//! HTTP/1.1 transport over a Unix socket for ureq: the only place the Docker driver opens a
//! socket.
//!
//! This module owns a ureq `Connector` that connects every request to one fixed Unix socket
//! path, its `Transport` (reads and writes on the `UnixStream`, bounded by ureq's timeouts) and
//! a resolver that never looks up host names. It speaks no HTTP itself (ureq does) and never
//! interprets what flows through it.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};

/// Connects every request to the Unix socket at `path`, whatever the URI's host.
#[derive(Debug)]
pub(super) struct UnixConnector {
    pub(super) path: PathBuf,
}

impl Connector<()> for UnixConnector {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<UnixTransport>, ureq::Error> {
        let stream = UnixStream::connect(&self.path)?;
        let transport = UnixTransport {
            stream: Arc::new(SharedStream(stream)),
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
        };
        let handle: Weak<dyn ShutdownHandle> =
            Arc::downgrade(&transport.stream) as Weak<dyn ShutdownHandle>;
        (details.register_shutdown)(handle)?;
        Ok(Some(transport))
    }
}

/// The stream, shared weakly with ureq's shutdown registry.
#[derive(Debug)]
struct SharedStream(UnixStream);

impl ShutdownHandle for SharedStream {
    fn shutdown(&self) {
        // An error means the socket is already closed.
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// One connection to the Docker socket.
#[derive(Debug)]
pub(super) struct UnixTransport {
    stream: Arc<SharedStream>,
    buffers: LazyBuffers,
}

/// The timeout to apply to the next blocking call, or the timeout error once it is spent.
fn io_timeout(timeout: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if timeout.after.is_zero() {
        return Err(ureq::Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|d| *d))
}

fn map_io(e: io::Error, timeout: NextTimeout) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ureq::Error::Timeout(timeout.reason),
        _ => ureq::Error::Io(e),
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let stream = &self.stream.0;
        stream.set_write_timeout(io_timeout(timeout)?)?;
        let output = &self.buffers.output()[..amount];
        let mut writer = stream;
        writer.write_all(output).map_err(|e| map_io(e, timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let stream = &self.stream.0;
        stream.set_read_timeout(io_timeout(timeout)?)?;
        let input = self.buffers.input_append_buf();
        let mut reader = stream;
        let amount = loop {
            match reader.read(input) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => break result.map_err(|e| map_io(e, timeout))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled connection is usable only if the daemon has sent nothing and not closed it.
        let stream = &self.stream.0;
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let mut probe = [0u8; 1];
        let mut reader = stream;
        let open =
            matches!(reader.read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).is_ok() && open
    }
}

/// A resolver that resolves nothing: the connector ignores addresses.
#[derive(Debug)]
pub(super) struct NoResolver;

impl Resolver for NoResolver {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 80)));
        Ok(addrs)
    }
}
