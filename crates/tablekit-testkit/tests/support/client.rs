//! A blocking client that reads responses the way the tests need to inspect them.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::Message;

/// Reads one message; `Ok(None)` at a clean end of stream. `no_body` is for responses to HEAD.
pub fn read_message(
    r: &mut impl BufRead,
    response: bool,
    no_body: bool,
) -> std::io::Result<Option<Message>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(ErrorKind::UnexpectedEof.into())
            };
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut msg = Message {
        head,
        ..Message::default()
    };
    let status = msg.status();
    if no_body || (response && (status < 200 || status == 204 || status == 304)) {
        return Ok(Some(msg));
    }
    if msg
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut line = String::new();
            r.read_line(&mut line)?;
            msg.raw_body.extend_from_slice(line.as_bytes());
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::new(ErrorKind::InvalidData, line.clone()))?;
            if size == 0 {
                break;
            }
            let mut data = vec![0; size + 2];
            r.read_exact(&mut data)?;
            msg.raw_body.extend_from_slice(&data);
            msg.body.extend_from_slice(&data[..size]);
        }
        loop {
            let mut line = String::new();
            r.read_line(&mut line)?;
            msg.raw_body.extend_from_slice(line.as_bytes());
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
    } else if let Some(len) = msg.header("content-length") {
        let mut data = vec![0; len.parse().expect("numeric content-length")];
        r.read_exact(&mut data)?;
        msg.raw_body = data.clone();
        msg.body = data;
    } else if response {
        r.read_to_end(&mut msg.body)?;
        msg.raw_body = msg.body.clone();
    }
    Ok(Some(msg))
}

/// A keep-alive client connection.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect to the proxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Self {
            reader: BufReader::new(stream),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("send");
    }

    pub fn read(&mut self, head_request: bool) -> std::io::Result<Message> {
        read_message(&mut self.reader, true, head_request)?
            .ok_or_else(|| ErrorKind::UnexpectedEof.into())
    }

    /// Sends a request with `Content-Length` framing and reads its response.
    pub fn request(&mut self, method: &str, target: &str, body: &[u8]) -> std::io::Result<Message> {
        let head = format!(
            "{method} {target} HTTP/1.1\r\nHost: proxy-test\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        self.reader.get_mut().write_all(&bytes)?;
        self.read(method == "HEAD")
    }

    pub fn get(&mut self, target: &str) -> Message {
        self.request("GET", target, b"").expect("a response")
    }

    /// Whether the connection is closed (end of stream or reset) with nothing left to read.
    pub fn closed_without_data(&mut self) -> bool {
        let mut buf = [0u8; 1];
        match self.reader.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ),
        }
    }
}
