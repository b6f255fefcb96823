//! Starting, waiting for and stopping an Azurite process.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::install::AzuriteInstall;
use crate::tls::TlsFiles;

/// The well-known Azurite account name.
pub const ACCOUNT: &str = "devstoreaccount1";
/// The well-known Azurite account key (public; it protects nothing).
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 4;

/// Why Azurite could not be used. Every message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AzuriteError {
    /// Azurite (the pinned version) is not installed where tablekit looks for it.
    #[error(
        "Azurite {want} is not installed in {dir} (found: {found}); install it with `{cmd}` (needs Node >= 20 and npm)",
        want = crate::AZURITE_VERSION,
        found = found.as_deref().unwrap_or("nothing"),
        cmd = crate::INSTALL_COMMAND
    )]
    NotInstalled {
        /// Where tablekit looked.
        dir: PathBuf,
        /// The version found there, if any.
        found: Option<String>,
    },
    /// `node` could not be started.
    #[error("could not run `node` ({0}); install Node.js >= 20 and make sure `node` is on PATH")]
    NodeMissing(std::io::Error),
    /// The process exited before it was ready.
    #[error("Azurite exited during start-up ({status}); its output: {output}")]
    Exited {
        /// The exit status.
        status: String,
        /// The last lines it printed, joined on one line.
        output: String,
    },
    /// The ports did not accept connections in time, in any attempt.
    #[error(
        "Azurite did not accept connections on {ports:?} within {secs} s ({attempts} attempt(s); \
         in the last, the process {process}); its output: {output}"
    )]
    NotReady {
        /// The ports waited on in the last attempt.
        ports: [u16; 3],
        /// How long tablekit waited in each attempt.
        secs: u64,
        /// How many emulators were started, each on fresh ports (one with fixed ports).
        attempts: usize,
        /// What the last emulator process was doing when given up on — its scheduler state
        /// and the CPU time it had used, where the system tells (Linux) — to tell a busy
        /// machine from a hung emulator.
        process: String,
        /// The last lines it printed.
        output: String,
    },
    /// Another I/O failure (log file, free port search).
    #[error("Azurite start-up failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The three service endpoints of a running emulator ([`Azurite::endpoints`]), or of proxies
/// in front of it.
///
/// The fields are public for reading. Build one with [`Endpoints::new`], or change one
/// endpoint of an emulator's with a `with_*` setter — say, to send only the queue traffic
/// through a [`FaultProxy`](crate::FaultProxy):
///
/// ```no_run
/// use std::net::SocketAddr;
/// use tablekit_testkit::{Azurite, FaultProxy};
///
/// let azurite = Azurite::start()?;
/// let queue_port = azurite.ports()[1];
/// let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], queue_port)))?;
/// let endpoints = azurite
///     .endpoints()
///     .clone()
///     .with_queue(proxy.endpoint_for(&azurite.endpoints().queue));
/// assert_eq!(endpoints.table, azurite.endpoints().table);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Endpoints {
    /// e.g. `http://127.0.0.1:49152/devstoreaccount1` (`https://` with OAuth)
    pub blob: String,
    /// e.g. `http://127.0.0.1:49153/devstoreaccount1`
    pub queue: String,
    /// e.g. `http://127.0.0.1:49154/devstoreaccount1`
    pub table: String,
}

impl Endpoints {
    /// The blob, queue and table endpoints, in the order of [`Azurite::ports`] and
    /// [`AzuriteBuilder::with_ports`].
    pub fn new(
        blob: impl Into<String>,
        queue: impl Into<String>,
        table: impl Into<String>,
    ) -> Self {
        Self {
            blob: blob.into(),
            queue: queue.into(),
            table: table.into(),
        }
    }

    /// Replaces [`Endpoints::blob`].
    #[must_use]
    pub fn with_blob(mut self, blob: impl Into<String>) -> Self {
        self.blob = blob.into();
        self
    }

    /// Replaces [`Endpoints::queue`].
    #[must_use]
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Replaces [`Endpoints::table`].
    #[must_use]
    pub fn with_table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }
}

/// Options for starting Azurite. Obtain with [`Azurite::builder`].
#[derive(Debug, Clone, Default)]
pub struct AzuriteBuilder {
    ports: Option<[u16; 3]>,
    location: Option<PathBuf>,
    install: Option<AzuriteInstall>,
    inherit_output: bool,
    ready_timeout: Option<Duration>,
    oauth: bool,
}

impl AzuriteBuilder {
    /// Fixed blob, queue and table ports (default: three free loopback ports).
    #[must_use]
    pub fn with_ports(mut self, blob: u16, queue: u16, table: u16) -> Self {
        self.ports = Some([blob, queue, table]);
        self
    }

    /// Persist data on disk in `dir` instead of in memory (used to restart an emulator and
    /// keep its data).
    #[must_use]
    pub fn with_disk_persistence(mut self, dir: impl Into<PathBuf>) -> Self {
        self.location = Some(dir.into());
        self
    }

    /// Use this installation instead of [`AzuriteInstall::locate`].
    #[must_use]
    pub fn with_install(mut self, install: AzuriteInstall) -> Self {
        self.install = Some(install);
        self
    }

    /// How long to wait for the ports to accept connections in each start attempt (default
    /// and maximum: 30 s).
    #[must_use]
    pub fn with_ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = Some(timeout.min(READY_TIMEOUT));
        self
    }

    /// Serve HTTPS and accept bearer tokens (`--oauth basic`) besides the account key and
    /// SAS. A certificate authority and a server certificate for `127.0.0.1` are generated
    /// for this emulator (in a directory of the temp dir that is removed when it stops);
    /// clients trust [`Azurite::ca_certificate_pem`].
    ///
    /// Azurite then checks a token's `iat`/`nbf`/`exp`, that its issuer starts with
    /// `https://sts.windows.net/` or `https://login.microsoftonline.com/`, and that its
    /// audience is `https://storage.azure.com` or the account's service
    /// (`https://devstoreaccount1.table.core.windows.net`) — not its signature.
    #[must_use]
    pub fn with_oauth(mut self) -> Self {
        self.oauth = true;
        self
    }

    /// Let Azurite print to this process's stdout/stderr (for `cargo xtask azurite`).
    #[must_use]
    pub fn with_inherited_output(mut self) -> Self {
        self.inherit_output = true;
        self
    }

    /// Starts Azurite and waits until it reports listening on its blob, queue and table ports
    /// and they accept connections (at most 30 s). A port another process listens on does not
    /// count: the emulator cannot bind it, exits, and the start is retried on new ports.
    ///
    /// # Errors
    /// [`AzuriteError`] when Azurite is not installed, Node is missing, or the emulator exits or
    /// does not become ready. With free ports, an emulator that exits (a lost port race) or is
    /// not ready in time is stopped and the start retried on new ports, up to 4 attempts.
    pub fn start(self) -> Result<Azurite, AzuriteError> {
        let install = match self.install.clone() {
            Some(install) => install,
            None => AzuriteInstall::locate()?,
        };
        let mut last = None;
        for attempt in 1..=START_ATTEMPTS {
            let ports = match self.ports {
                Some(ports) => ports,
                None => free_ports()?,
            };
            match self.start_once(&install, ports) {
                Ok(azurite) => return Ok(azurite),
                // Another process may have taken a free port between our probe and Azurite's
                // bind; or this emulator stalled in its start-up, which a new one on a
                // machine less busy a moment later may not. Try again with fresh ports.
                // Fixed ports are not retried: what holds them still holds them.
                Err(AzuriteError::NotReady {
                    ports,
                    secs,
                    process,
                    output,
                    ..
                }) => {
                    last = Some(AzuriteError::NotReady {
                        ports,
                        secs,
                        attempts: attempt,
                        process,
                        output,
                    });
                    if self.ports.is_some() {
                        break;
                    }
                }
                Err(e @ AzuriteError::Exited { .. }) if self.ports.is_none() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(AzuriteError::Io(std::io::Error::other(
            "no start attempt made",
        ))))
    }

    fn start_once(
        &self,
        install: &AzuriteInstall,
        ports: [u16; 3],
    ) -> Result<Azurite, AzuriteError> {
        let stem = format!(
            "tablekit-azurite-{}-{}",
            std::process::id(),
            crate::unique_queue_name("")
        );
        let tls = if self.oauth {
            Some(TlsFiles::create(std::env::temp_dir().join(stem))?)
        } else {
            None
        };
        let mut cmd = Command::new("node");
        cmd.arg(install.launcher());
        for (name, port) in ["blob", "queue", "table"].iter().zip(ports) {
            cmd.arg(format!("--{name}Host")).arg("127.0.0.1");
            cmd.arg(format!("--{name}Port")).arg(port.to_string());
        }
        match &self.location {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                cmd.arg("--location").arg(dir);
            }
            None => {
                cmd.arg("--inMemoryPersistence");
            }
        }
        cmd.args(["--skipApiVersionCheck", "--disableTelemetry", "--silent"]);
        if let Some(tls) = &tls {
            cmd.args(["--oauth", "basic"]);
            cmd.arg("--cert").arg(tls.cert_path());
            cmd.arg("--key").arg(tls.key_path());
        }
        // Azurite writes its debug/db files relative to the working directory: keep them out
        // of the caller's tree.
        cmd.current_dir(std::env::temp_dir());
        // The launcher exits when this pipe closes, i.e. when this process dies in any way.
        cmd.stdin(Stdio::piped());
        if self.inherit_output {
            cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        } else {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                if let Some(tls) = &tls {
                    let _ = std::fs::remove_dir_all(tls.dir());
                }
                return Err(AzuriteError::NodeMissing(e));
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoints = Endpoints {
            blob: format!("{scheme}://127.0.0.1:{}/{ACCOUNT}", ports[0]),
            queue: format!("{scheme}://127.0.0.1:{}/{ACCOUNT}", ports[1]),
            table: format!("{scheme}://127.0.0.1:{}/{ACCOUNT}", ports[2]),
        };
        let output = (!self.inherit_output).then(|| Output::read(&mut child));
        let mut azurite = Azurite {
            child: Some(child),
            ports,
            endpoints,
            output,
            tls,
        };
        azurite.wait_ready(self.ready_timeout.unwrap_or(READY_TIMEOUT))?;
        Ok(azurite)
    }
}

/// A running Azurite emulator. The process is killed when this value is dropped, including
/// during a panic; if this process dies without unwinding, the emulator notices its closed
/// stdin and exits by itself.
#[derive(Debug)]
pub struct Azurite {
    child: Option<Child>,
    ports: [u16; 3],
    endpoints: Endpoints,
    /// What it prints, unless it prints to this process's terminal.
    output: Option<Output>,
    tls: Option<TlsFiles>,
}

impl Azurite {
    /// Starts Azurite on free loopback ports with in-memory storage.
    ///
    /// # Errors
    /// See [`AzuriteBuilder::start`].
    pub fn start() -> Result<Self, AzuriteError> {
        AzuriteBuilder::default().start()
    }

    /// Options for starting Azurite.
    pub fn builder() -> AzuriteBuilder {
        AzuriteBuilder::default()
    }

    /// A connection string for this emulator with explicit endpoints (well-known key).
    pub fn connection_string(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!(
            "DefaultEndpointsProtocol={scheme};AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={};QueueEndpoint={};TableEndpoint={};",
            self.endpoints.blob, self.endpoints.queue, self.endpoints.table
        )
    }

    /// With [`AzuriteBuilder::with_oauth`]: the PEM of the certificate authority that signed
    /// this emulator's server certificate, for clients to trust.
    pub fn ca_certificate_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// With [`AzuriteBuilder::with_oauth`]: the file holding
    /// [`ca_certificate_pem`](Self::ca_certificate_pem), for a client in another process.
    /// It is removed when the emulator stops.
    pub fn ca_certificate_path(&self) -> Option<PathBuf> {
        self.tls.as_ref().map(TlsFiles::ca_path)
    }

    /// Whether this emulator serves HTTPS and accepts bearer tokens.
    pub fn uses_oauth(&self) -> bool {
        self.tls.is_some()
    }

    /// The service endpoints.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The blob, queue and table ports.
    pub fn ports(&self) -> [u16; 3] {
        self.ports
    }

    /// The process id of the emulator.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the emulator and waits for it to exit.
    pub fn stop(mut self) {
        self.kill();
    }

    /// Stops the emulator gracefully (SIGINT, as on Ctrl-C: it closes its servers and flushes
    /// persisted data) and waits up to `timeout` before killing it. Data persisted on disk
    /// survives a restart with the same directory.
    pub fn stop_gracefully(mut self, timeout: Duration) {
        if let Some(child) = self.child.as_mut() {
            // std has no signal API and this crate forbids unsafe code: use kill(1).
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
    }

    /// Blocks until the emulator exits (used by `cargo xtask azurite`).
    ///
    /// # Errors
    /// The I/O error of waiting on the process.
    pub fn wait(mut self) -> std::io::Result<std::process::ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| std::io::Error::other("not running"))?;
        // `Child::wait` closes stdin first, which would make the launcher exit at once: keep
        // the pipe open for as long as we wait.
        let stdin = child.stdin.take();
        let status = child.wait();
        drop(stdin);
        status
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(tls) = self.tls.take() {
            let _ = std::fs::remove_dir_all(tls.dir());
        }
    }

    fn output_tail(&self) -> String {
        match &self.output {
            Some(output) => output.tail(),
            None => "(printed to the terminal)".into(),
        }
    }

    /// `scheme://127.0.0.1`, as the emulator names its endpoints in its output.
    fn host(&self) -> &'static str {
        if self.tls.is_some() {
            "https://127.0.0.1"
        } else {
            "http://127.0.0.1"
        }
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), AzuriteError> {
        let start = Instant::now();
        let mut pending: Vec<u16> = self.ports.to_vec();
        while !pending.is_empty() {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    if let Some(output) = &self.output {
                        output.drain(Duration::from_secs(2));
                    }
                    let output = self.output_tail();
                    self.child = None;
                    self.kill();
                    return Err(AzuriteError::Exited {
                        status: status.to_string(),
                        output,
                    });
                }
            }
            if start.elapsed() > timeout {
                let output = self.output_tail();
                let process = (self.child.as_ref())
                    .map_or_else(|| "is gone".to_owned(), |child| process_state(child.id()));
                self.kill();
                return Err(AzuriteError::NotReady {
                    ports: self.ports,
                    secs: timeout.as_secs(),
                    attempts: 1,
                    process,
                    output,
                });
            }
            // A port that accepts connections may be another process's (one that took the
            // port between our probe and the emulator's bind): when the emulator's output is
            // read here, a port counts only once the emulator says it listens there itself.
            pending.retain(|&port| {
                if let Some(output) = &self.output {
                    let own = format!("successfully listening at {}:{port}", self.host());
                    if !output.contains(&own) {
                        return true;
                    }
                }
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err()
            });
            if !pending.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What an emulator prints on its stdout and stderr, read from their pipes by a thread each
/// and kept in memory — the last [`Output::KEPT`] lines, and every line saying where it
/// listens — so that neither its readiness nor the report of its failure needs a writable
/// disk. The threads end when the emulator exits and closes the pipes.
#[derive(Debug, Clone, Default)]
struct Output(Arc<Mutex<Printed>>);

#[derive(Debug, Default)]
struct Printed {
    last: VecDeque<String>,
    listening: Vec<String>,
    /// Pipes still being read.
    open: usize,
}

impl Output {
    const KEPT: usize = 40;

    /// Starts reading `child`'s stdout and stderr, which must be pipes.
    fn read(child: &mut Child) -> Self {
        let output = Self::default();
        let pipes: [Option<Box<dyn Read + Send>>; 2] = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for pipe in pipes.into_iter().flatten() {
            output.lock().open += 1;
            let output = output.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(pipe);
                let mut line = Vec::new();
                while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                    output.push(String::from_utf8_lossy(&line).trim_end().to_owned());
                    line.clear();
                }
                output.lock().open -= 1;
            });
        }
        output
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Printed> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits, at most `timeout`, until both pipes are read to their end: once the emulator
    /// has exited, what it printed last is then here.
    fn drain(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.lock().open > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn push(&self, line: String) {
        if line.trim().is_empty() {
            return;
        }
        let mut printed = self.lock();
        if line.contains("listening at") {
            printed.listening.push(line.clone());
        }
        if printed.last.len() == Self::KEPT {
            printed.last.pop_front();
        }
        printed.last.push_back(line);
    }

    /// Whether a line printed so far contains `text`.
    fn contains(&self, text: &str) -> bool {
        let printed = self.lock();
        (printed.listening.iter().chain(&printed.last)).any(|line| line.contains(text))
    }

    /// The last lines printed, joined on one line.
    fn tail(&self) -> String {
        let printed = self.lock();
        let skip = printed.last.len().saturating_sub(4);
        let tail: Vec<&str> = printed.last.iter().skip(skip).map(String::as_str).collect();
        if tail.is_empty() {
            "(nothing)".into()
        } else {
            tail.join(" | ")
        }
    }
}

/// What process `pid` is doing, in words: its scheduler state and the CPU time it has used,
/// from `/proc/<pid>/stat` (Linux; elsewhere, only that it runs).
fn process_state(pid: u32) -> String {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return "was still running".into();
    };
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return "was still running".into();
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = match fields.first().copied() {
        Some("R") => "was running or waiting for a CPU",
        Some("S") => "was sleeping (waiting for an event)",
        Some("D") => "was waiting for the disk",
        Some("T" | "t") => "was stopped",
        Some("Z") => "had exited",
        _ => "was still running",
    };
    // utime and stime, fields 14 and 15 of the whole line, in clock ticks of 1/100 s (the
    // USER_HZ every Linux architecture tablekit builds for uses).
    let ticks: Option<u64> = (fields.get(11).zip(fields.get(12)))
        .and_then(|(u, s)| Some(u.parse::<u64>().ok()? + s.parse::<u64>().ok()?));
    match ticks {
        Some(t) => format!("{state} and had used {:.2} s of CPU", t as f64 / 100.0),
        None => state.to_owned(),
    }
}

/// Three distinct free loopback ports. They are held open together so they differ, then
/// released for Azurite to bind.
fn free_ports() -> std::io::Result<[u16; 3]> {
    let listeners = [
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?,
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?,
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?,
    ];
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::Endpoints;

    #[test]
    fn endpoints_take_blob_queue_table_in_port_order_and_setters_replace_one() {
        let e = Endpoints::new("b", "q", "t");
        assert_eq!(
            (e.blob.as_str(), e.queue.as_str(), e.table.as_str()),
            ("b", "q", "t")
        );
        let e = e.with_queue("q2");
        assert_eq!(
            (e.blob.as_str(), e.queue.as_str(), e.table.as_str()),
            ("b", "q2", "t")
        );
        let e = e.with_blob("b2").with_table("t2");
        assert_eq!(
            (e.blob.as_str(), e.queue.as_str(), e.table.as_str()),
            ("b2", "q2", "t2")
        );
    }
}
