//! Holding bodies back for the throttle model: a request body read before the decision to
//! forward it, a response body read before the client gets it, both bounded.

use std::io::{Error, ErrorKind, Result};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncBufRead, AsyncWrite};

use super::body::copy_body;
use super::http::{Body, invalid};

/// The most of one body held in memory: well above the service's limits (4 MiB for a
/// transaction, 1 MiB per entity, 1,000 entities per query page of typical size).
pub(crate) const CAPTURE_LIMIT: usize = 16 << 20;

/// Reads a request body as framed (raw bytes, to forward unchanged) when it is at most
/// [`CAPTURE_LIMIT`] bytes. `Ok(None)` for a declared length above the limit, which is then
/// left unread; a chunked body that turns out larger is an error (it cannot be forwarded
/// without having been read).
pub(crate) async fn read_request_body<R>(r: &mut R, body: Body) -> Result<Option<Vec<u8>>>
where
    R: AsyncBufRead + Unpin,
{
    if let Body::Length(n) = body {
        if usize::try_from(n).map_or(true, |n| n > CAPTURE_LIMIT) {
            return Ok(None);
        }
    }
    let mut out = Limited(Vec::new());
    copy_body(r, &mut out, body).await?;
    Ok(Some(out.0))
}

/// The payload of a body as framed: chunked framing removed, anything else as is. The raw
/// bytes were validated while they were read, so malformed framing only ends the payload early.
pub(crate) fn payload(raw: &[u8], body: Body) -> Vec<u8> {
    if body != Body::Chunked {
        return raw.to_vec();
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(eol) = rest.iter().position(|&b| b == b'\n') {
        let line = String::from_utf8_lossy(&rest[..eol]);
        let digits = line.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(digits, 16) else {
            break;
        };
        rest = &rest[eol + 1..];
        if size == 0 || size > rest.len() {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size..];
        // The CRLF after the chunk data.
        rest = rest.strip_prefix(b"\r").unwrap_or(rest);
        rest = rest.strip_prefix(b"\n").unwrap_or(rest);
    }
    out
}

/// A `Vec` that refuses to grow past [`CAPTURE_LIMIT`].
struct Limited(Vec<u8>);

impl AsyncWrite for Limited {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize>> {
        let this = self.get_mut();
        if this.0.len() + buf.len() > CAPTURE_LIMIT {
            return Poll::Ready(Err(invalid(
                "chunked request body too large for the throttle model",
            )));
        }
        this.0.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A writer that holds a response (its head, then its body) back from `out` until it ends, so
/// it can be charged before the client sees it. A body beyond [`CAPTURE_LIMIT`] spills: what
/// was held is written and the rest streams through.
pub(crate) struct Spill<'a, W> {
    out: &'a mut W,
    held: Vec<u8>,
    head_len: usize,
    /// Bytes of `held` already written to `out`, once spilling.
    written: usize,
    spilled: bool,
}

impl<'a, W: AsyncWrite + Unpin> Spill<'a, W> {
    pub(crate) fn new(out: &'a mut W, head: &[u8]) -> Self {
        Self {
            out,
            held: head.to_vec(),
            head_len: head.len(),
            written: 0,
            spilled: false,
        }
    }

    /// The body held back, or `None` if it spilled (and has been written in full).
    pub(crate) fn held_body(&self) -> Option<&[u8]> {
        (!self.spilled).then(|| &self.held[self.head_len..])
    }

    /// Writes what is held (head and body) to `out`.
    pub(crate) async fn release(self) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        if !self.spilled {
            self.out.write_all(&self.held).await?;
        }
        Ok(())
    }

    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        while self.written < self.held.len() {
            let n = ready!(Pin::new(&mut *self.out).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(Error::from(ErrorKind::WriteZero)));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Spill<'_, W> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<Result<usize>> {
        let this = self.get_mut();
        if !this.spilled {
            if this.held.len() - this.head_len + buf.len() <= CAPTURE_LIMIT {
                this.held.extend_from_slice(buf);
                return Poll::Ready(Ok(buf.len()));
            }
            this.spilled = true;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut *this.out).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.spilled {
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut *this.out).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut *self.get_mut().out).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_payloads_lose_their_framing() {
        let raw = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-t: 1\r\n\r\n";
        assert_eq!(payload(raw, Body::Chunked), b"hello world");
        assert_eq!(payload(b"as is", Body::Length(5)), b"as is");
    }

    #[tokio::test]
    async fn request_bodies_are_read_whole_up_to_the_limit() {
        let mut r = tokio::io::BufReader::new(&b"abcdefNEXT"[..]);
        let got = read_request_body(&mut r, Body::Length(6)).await.unwrap();
        assert_eq!(got.as_deref(), Some(&b"abcdef"[..]));
        let huge = Body::Length(CAPTURE_LIMIT as u64 + 1);
        assert_eq!(read_request_body(&mut r, huge).await.unwrap(), None);
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut rest)
            .await
            .unwrap();
        assert_eq!(rest, b"NEXT", "a body too large to hold is left unread");

        let mut wire = format!("{:x}\r\n", CAPTURE_LIMIT + 1).into_bytes();
        wire.extend(std::iter::repeat_n(b'x', CAPTURE_LIMIT + 1));
        wire.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut r = tokio::io::BufReader::new(&wire[..]);
        assert!(read_request_body(&mut r, Body::Chunked).await.is_err());
    }

    #[tokio::test]
    async fn spill_holds_small_bodies_and_streams_large_ones() {
        use tokio::io::AsyncWriteExt;
        let mut out = Vec::new();
        let mut spill = Spill::new(&mut out, b"HEAD");
        spill.write_all(b"body").await.unwrap();
        assert_eq!(spill.held_body(), Some(&b"body"[..]));
        spill.release().await.unwrap();
        assert_eq!(out, b"HEADbody");

        let mut out = Vec::new();
        let big = vec![7u8; CAPTURE_LIMIT + 10];
        let mut spill = Spill::new(&mut out, b"HEAD");
        spill.write_all(&big[..100]).await.unwrap();
        spill.write_all(&big[100..]).await.unwrap();
        spill.flush().await.unwrap();
        assert_eq!(spill.held_body(), None);
        spill.release().await.unwrap();
        assert_eq!(out.len(), 4 + big.len());
        assert!(out.starts_with(b"HEAD") && out[4..] == big[..]);
    }
}
