//! A scriptable HTTP server that records what reaches it.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Message, read_message};

/// What a scripted upstream does after reading a request.
pub enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
    Close,
}

type Script = dyn Fn(&Message) -> Vec<Step> + Send + Sync;

/// An HTTP server on a free loopback port that records every complete request it reads and
/// answers as its script says.
pub struct Upstream {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Message>>>,
}

impl Upstream {
    pub fn start(script: impl Fn(&Message) -> Vec<Step> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let log = received.clone();
        // The accept thread lives as long as the test process; each test has its own port.
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let (log, script) = (log.clone(), script.clone());
                std::thread::spawn(move || serve(stream, &log, &*script));
            }
        });
        Self { addr, received }
    }

    /// Answers every request with its own body, framed as the request framed it.
    pub fn echo() -> Self {
        Self::start(|req| vec![Step::Write(echo_response(req))])
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Message>>, script: &Script) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    while let Ok(Some(request)) = read_message(&mut reader, false, false) {
        log.lock().unwrap().push(request.clone());
        for step in script(&request) {
            match step {
                Step::Write(bytes) => {
                    if writer.write_all(&bytes).is_err() {
                        return;
                    }
                }
                Step::Sleep(d) => std::thread::sleep(d),
                Step::Close => return,
            }
        }
    }
}

pub fn echo_response(req: &Message) -> Vec<u8> {
    let framing = if req.header("transfer-encoding").is_some() {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {}", req.raw_body.len())
    };
    let mut bytes = format!("HTTP/1.1 200 OK\r\n{framing}\r\n\r\n").into_bytes();
    bytes.extend_from_slice(&req.raw_body);
    bytes
}
