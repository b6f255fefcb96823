//! Streaming message bodies by their framing, byte for byte, in bounded memory.

use std::io::{ErrorKind, Result};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use super::http::{Body, MAX_HEAD, invalid, read_line};

/// Largest chunk-size or trailer line accepted.
const MAX_LINE: u64 = 8 * 1024;

/// Streams a body from `r` to `w` unchanged (chunk sizes, extensions and trailers included).
pub(crate) async fn copy_body<R, W>(r: &mut R, w: &mut W, body: Body) -> Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match body {
        Body::None => Ok(()),
        Body::Length(n) => copy_exact(r, w, n).await,
        Body::Chunked => copy_chunked(r, w).await,
        Body::UntilClose => loop {
            let buf = r.fill_buf().await?;
            if buf.is_empty() {
                return Ok(());
            }
            let n = buf.len();
            w.write_all(buf).await?;
            r.consume(n);
        },
    }
}

async fn copy_exact<R, W>(r: &mut R, w: &mut W, mut remaining: u64) -> Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    while remaining > 0 {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        let n = buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        w.write_all(&buf[..n]).await?;
        r.consume(n);
        remaining -= n as u64;
    }
    Ok(())
}

async fn copy_chunked<R, W>(r: &mut R, w: &mut W) -> Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut line = Vec::new();
    loop {
        line.clear();
        if read_line(r, &mut line, MAX_LINE).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        w.write_all(&line).await?;
        let size = chunk_size(&line)?;
        if size == 0 {
            break;
        }
        copy_exact(r, w, size).await?;
        line.clear();
        if read_line(r, &mut line, MAX_LINE).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        if !matches!(line.as_slice(), b"\r\n" | b"\n") {
            return Err(invalid("chunk data not followed by CRLF"));
        }
        w.write_all(&line).await?;
    }
    // Trailer fields, then the blank line that ends the message.
    let mut trailer_bytes = 0u64;
    loop {
        line.clear();
        let n = read_line(r, &mut line, MAX_LINE).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        trailer_bytes += n as u64;
        if trailer_bytes > MAX_HEAD {
            return Err(invalid("chunked trailers too large"));
        }
        w.write_all(&line).await?;
        if matches!(line.as_slice(), b"\r\n" | b"\n") {
            return Ok(());
        }
    }
}

fn chunk_size(line: &[u8]) -> Result<u64> {
    let text = std::str::from_utf8(line).map_err(|_| invalid("malformed chunk size"))?;
    let digits = text.split(';').next().unwrap_or_default().trim();
    if digits.is_empty() || digits.len() > 16 {
        return Err(invalid("malformed chunk size"));
    }
    u64::from_str_radix(digits, 16).map_err(|_| invalid("malformed chunk size"))
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn chunked_bodies_are_copied_verbatim_and_end_at_their_trailers() {
        let wire = b"5;ext=1\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\nNEXT".to_vec();
        let mut reader = tokio::io::BufReader::new(&wire[..]);
        let mut out = Vec::new();
        copy_body(&mut reader, &mut out, Body::Chunked)
            .await
            .unwrap();
        assert_eq!(out, &wire[..wire.len() - 4]);
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "NEXT");
    }

    #[tokio::test]
    async fn malformed_or_truncated_chunks_are_errors() {
        for wire in [
            &b"zz\r\n"[..],
            b"5\r\nhel",
            b"2\r\nhiX\r\n0\r\n\r\n",
            b"0\r\n",
        ] {
            let mut reader = tokio::io::BufReader::new(wire);
            let copied = copy_body(&mut reader, &mut Vec::new(), Body::Chunked).await;
            assert!(copied.is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
        let mut reader = tokio::io::BufReader::new(&b"abc"[..]);
        assert!(
            copy_body(&mut reader, &mut Vec::new(), Body::Length(4))
                .await
                .is_err()
        );
    }
}
