//! The accept loop: hyper's HTTP/1 server with the limits axum's `serve` does not set
//! (a header read timeout, a header size bound, a write-stall timeout), and graceful
//! shutdown.
//!
//! Everything here guards against clients, not against load: a connection that sends
//! its head too slowly, a head larger than the bound (431), or a peer that stops reading
//! so that a write stays blocked, is closed; closing it drops the response body, which
//! cancels the sequences behind it (their KV blocks go back to the pool). At most
//! `max_connections` are open at once: the loop takes a permit before it accepts.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

use crate::options::ServeError;
use crate::state::AppState;

/// A stream whose writes fail once they have been blocked for `stall` in a row (the peer
/// stopped reading).
struct StallGuard<T> {
    inner: T,
    stall: Duration,
    blocked: Option<Pin<Box<Sleep>>>,
}

impl<T> StallGuard<T> {
    fn pending(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let stall = self.stall;
        let timer = self.blocked.get_or_insert_with(|| Box::pin(sleep(stall)));
        if timer.as_mut().poll(cx).is_ready() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the peer stopped reading"));
        }
        Ok(())
    }

    /// The stall rule applied to one write-side poll: a pending write starts (or keeps
    /// counting) the timer, and fails once it has run out; a finished one resets it.
    fn guard<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match poll {
            Poll::Pending => match self.pending(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => {
                self.blocked = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.guard(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.guard(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What the accept loop stops at shutdown: one model's engine, or every model of the
/// multi-model front.
pub(crate) trait Drain: Send + Sync {
    /// Stop taking work; what is in flight gets `grace`.
    fn shutdown(&self, grace: Duration);
    /// Whether everything has stopped.
    fn stopped(&self) -> bool;
}

impl Drain for AppState {
    fn shutdown(&self, grace: Duration) {
        self.engine.shutdown(grace);
    }

    fn stopped(&self) -> bool {
        self.engine.stats().stopped
    }
}

/// Serve `listener` until `signal` resolves (see [`crate::run`]).
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let app = crate::routes::router(Arc::clone(&state));
    let (limits, grace) = (state.limits, state.grace);
    serve_app(listener, app, limits, grace, state, signal).await
}

/// The accept loop over any route table; `drain` is what stops at the signal.
pub(crate) async fn serve_app<D: Drain + ?Sized>(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: crate::options::Limits,
    grace: Duration,
    drain: Arc<D>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let graceful = GracefulShutdown::new();
    let mut signal = std::pin::pin!(signal);
    let open = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    // After the signal the server drains: it keeps accepting, so that health checks read
    // 503 and new requests get 503 with Retry-After (a router retries them elsewhere),
    // until the engine has finished what it accepted (or the grace is over) and stopped.
    let mut draining = false;
    let poll = Duration::from_millis(20);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&open).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break, // never closed
            },
            _ = &mut signal, if !draining => {
                draining = true;
                drain.shutdown(grace);
                continue;
            }
            _ = sleep(poll), if draining => {
                if drain.stopped() { break }
                continue;
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors, say: back off instead of spinning.
                Err(_) => {
                    sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut signal, if !draining => {
                draining = true;
                drain.shutdown(grace);
                continue;
            }
            _ = sleep(poll), if draining => {
                if drain.stopped() { break }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(StallGuard { inner: stream, stall: limits.write_stall, blocked: None });
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192));
        let conn = http.serve_connection(io, TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    drain.shutdown(grace);
    graceful.shutdown().await;
    Ok(())
}
