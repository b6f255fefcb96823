//! Starting, waiting for and stopping an Azurite process.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
    /// The ports did not accept connections in time.
    #[error(
        "Azurite did not accept connections on {ports:?} within {secs} s; its output: {output}"
    )]
    NotReady {
        /// The ports waited on.
        ports: [u16; 3],
        /// How long tablekit waited.
        secs: u64,
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

    /// How long to wait for the ports to accept connections (default and maximum: 30 s).
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
    /// does not become ready. With free ports a lost port race is retried with new ports.
    pub fn start(self) -> Result<Azurite, AzuriteError> {
        let install = match self.install.clone() {
            Some(install) => install,
            None => AzuriteInstall::locate()?,
        };
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let ports = match self.ports {
                Some(ports) => ports,
                None => free_ports()?,
            };
            match self.start_once(&install, ports) {
                Ok(azurite) => return Ok(azurite),
                // Another process may have taken a free port between our probe and Azurite's
                // bind: try again with fresh ports. Fixed ports are not retried.
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
        let log_path = std::env::temp_dir().join(format!("{stem}.log"));
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
            let log = File::create(&log_path)?;
            cmd.stdout(log.try_clone()?).stderr(log);
        }
        let child = match cmd.spawn() {
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
        let mut azurite = Azurite {
            child: Some(child),
            ports,
            endpoints,
            log_path: (!self.inherit_output).then_some(log_path),
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
    log_path: Option<PathBuf>,
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
        if let Some(path) = self.log_path.take() {
            let _ = std::fs::remove_file(path);
        }
        if let Some(tls) = self.tls.take() {
            let _ = std::fs::remove_dir_all(tls.dir());
        }
    }

    fn output_tail(&self) -> String {
        let Some(path) = &self.log_path else {
            return "(printed to the terminal)".into();
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(4)..].join(" | ");
        if tail.is_empty() {
            "(nothing)".into()
        } else {
            tail
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
                self.kill();
                return Err(AzuriteError::NotReady {
                    ports: self.ports,
                    secs: timeout.as_secs(),
                    output,
                });
            }
            // A port that accepts connections may be another process's (one that took the
            // port between our probe and the emulator's bind): with the emulator's output in
            // a log, a port counts only once the emulator says it listens there itself.
            let log = self
                .log_path
                .as_ref()
                .map(|path| std::fs::read_to_string(path).unwrap_or_default());
            pending.retain(|&port| {
                if let Some(log) = &log {
                    let own = format!("successfully listening at {}:{port}", self.host());
                    if !log.contains(&own) {
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
