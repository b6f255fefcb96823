//! The emulator harness keeps its promises: ready when returned, distinct ports, nothing left
//! behind (on drop, on panic, on SIGKILL of the owner), one-line errors instead of hangs.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tablekit_testkit::{Azurite, AzuriteBuilder, AzuriteError, AzuriteInstall};

fn alive(pid: u32) -> bool {
    // A zombie has no command line; it has exited for our purposes.
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !alive(pid)
}

#[test]
fn started_emulators_are_ready_use_distinct_ports_and_die_on_drop() {
    let a = Azurite::start().unwrap();
    let b = Azurite::start().unwrap();
    let mut ports: Vec<u16> = a.ports().into_iter().chain(b.ports()).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 6, "six distinct ports: {ports:?}");
    for port in a.ports().into_iter().chain(b.ports()) {
        assert!(
            !(10000..=10002).contains(&port),
            "tests never use the standard ports"
        );
        TcpStream::connect(("127.0.0.1", port)).expect("ready means every port accepts");
    }
    let cs = a.connection_string();
    assert!(
        cs.contains(&a.endpoints().table) && cs.contains("AccountKey="),
        "{cs}"
    );
    let (pa, pb) = (a.pid().unwrap(), b.pid().unwrap());
    drop(a);
    b.stop();
    assert!(wait_gone(pa, Duration::from_secs(5)) && wait_gone(pb, Duration::from_secs(5)));
}

#[test]
fn a_panicking_test_still_stops_its_emulator() {
    let pid = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = pid.clone();
    let result = std::thread::spawn(move || {
        let azurite = Azurite::start().unwrap();
        *seen.lock().unwrap() = azurite.pid();
        panic!("test failure while the emulator runs");
    })
    .join();
    assert!(result.is_err());
    let pid = pid.lock().unwrap().expect("emulator was started");
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "emulator {pid} outlived the panic"
    );
}

/// Run as a child by `a_killed_owner_leaves_no_emulator`: start Azurite, report its pid, wait.
#[test]
fn child_owner_helper() {
    if std::env::var_os("TABLEKIT_TESTKIT_CHILD").is_none() {
        return;
    }
    let azurite = Azurite::start().unwrap();
    println!("AZURITE_PID={}", azurite.pid().unwrap());
    std::thread::sleep(Duration::from_secs(120));
    drop(azurite);
}

/// Run as a child by `an_emulator_starts_where_no_file_can_be_written`: start Azurite and
/// report the table port's answer.
#[cfg(target_os = "linux")]
#[test]
fn unwritable_temp_dir_helper() {
    if std::env::var_os("TABLEKIT_TESTKIT_UNWRITABLE").is_none() {
        return;
    }
    let azurite = Azurite::start().unwrap();
    let [.., table] = azurite.ports();
    let answered = std::net::TcpStream::connect(("127.0.0.1", table)).is_ok();
    println!("STARTED answered={answered}");
}

/// Readiness is read from the emulator's own output through pipes, not from a log file: an
/// emulator starts where no file can be written (a full disk, a read-only temp dir).
#[cfg(target_os = "linux")]
#[test]
fn an_emulator_starts_where_no_file_can_be_written() {
    // Not even root can create a file in /proc/self.
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "unwritable_temp_dir_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TABLEKIT_TESTKIT_UNWRITABLE", "1")
        .env("TMPDIR", "/proc/self")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("STARTED answered=true"),
        "{text}"
    );
}

#[test]
fn a_killed_owner_leaves_no_emulator() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_owner_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TABLEKIT_TESTKIT_CHILD", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let pid: u32 = stdout
        .lines()
        .map_while(Result::ok)
        // libtest may print `test child_owner_helper ... ` on the same line first.
        .find_map(|line| {
            line.split_once("AZURITE_PID=")
                .map(|(_, p)| p.trim().parse().unwrap())
        })
        .expect("child reports the emulator pid");
    assert!(alive(pid));
    child.kill().unwrap(); // SIGKILL: no destructor runs in the owner.
    child.wait().unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(10)),
        "emulator {pid} outlived its killed owner"
    );
}

fn fake_install(launch_js: &str) -> AzuriteInstall {
    let dir = std::env::temp_dir().join(tablekit_testkit::unique_queue_name("fake-azurite"));
    let pkg = dir.join("node_modules/azurite");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name":"azurite","version":"3.35.0"}"#,
    )
    .unwrap();
    std::fs::write(dir.join("launch.js"), launch_js).unwrap();
    AzuriteInstall::at(&dir).unwrap()
}

fn one_line(e: &AzuriteError) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "errors are one line: {text}");
    text
}

#[test]
fn an_emulator_that_exits_gives_its_output_not_a_hang() {
    let install = fake_install("console.error('listen EADDRINUSE: boom'); process.exit(3);");
    let started = Instant::now();
    let err = Azurite::builder()
        .with_install(install)
        .with_ports(1, 2, 3)
        .start()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let text = one_line(&err);
    assert!(
        matches!(err, AzuriteError::Exited { .. }) && text.contains("EADDRINUSE"),
        "{text}"
    );
}

/// A fake emulator that counts its starts in a file, spins until it has used 300 ms of CPU,
/// then never listens; and that file.
///
/// The spin is measured in CPU time, not wall time: on a loaded machine a wall-clock spin
/// is preempted and uses less CPU than it lasts (0.19 s for a 300 ms spin was seen).
fn stalling_install() -> (AzuriteInstall, std::path::PathBuf) {
    let starts = std::env::temp_dir().join(tablekit_testkit::unique_queue_name("starts"));
    let script = format!(
        "require('fs').appendFileSync({:?}, 'x'); \
         const used = () => {{ const u = process.cpuUsage(); return (u.user + u.system) / 1000; }}; \
         while (used() < 300) {{}} \
         setInterval(() => {{}}, 1000);",
        starts.display().to_string()
    );
    (fake_install(&script), starts)
}

/// Starts the [`stalling_install`] through `builder`, waiting 2 s (time for the spin on a
/// busy machine): the error, its text, and how many emulators were started.
fn start_stalling(builder: AzuriteBuilder) -> (AzuriteError, String, usize) {
    let (install, starts) = stalling_install();
    let err = builder
        .with_install(install)
        .with_ready_timeout(Duration::from_secs(2))
        .start()
        .unwrap_err();
    let text = one_line(&err);
    let started = std::fs::read_to_string(&starts).unwrap_or_default().len();
    let _ = std::fs::remove_file(&starts);
    (err, text, started)
}

#[test]
fn an_emulator_that_never_listens_is_retried_on_new_ports_then_times_out_saying_what_it_did() {
    let (err, text, started) = start_stalling(Azurite::builder());
    let AzuriteError::NotReady {
        attempts, process, ..
    } = &err
    else {
        panic!("{text}");
    };
    assert_eq!((*attempts, started), (4, 4), "{text}");
    if cfg!(target_os = "linux") {
        // The spin shows as CPU time: a busy machine is told from a hung emulator.
        let cpu: f64 = (process.split("used ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no CPU time in {text}"));
        assert!((0.25..2.5).contains(&cpu), "{text}");
    }
}

#[test]
fn an_emulator_on_fixed_ports_that_never_listens_is_not_retried() {
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        })
        .collect();
    let (err, text, started) =
        start_stalling(Azurite::builder().with_ports(ports[0], ports[1], ports[2]));
    assert!(
        matches!(err, AzuriteError::NotReady { attempts: 1, .. }) && started == 1,
        "{started} starts: {text}"
    );
}

#[test]
fn a_missing_install_says_how_to_install() {
    let err = AzuriteInstall::at(Path::new("/nonexistent/azurite")).unwrap_err();
    let text = one_line(&err);
    assert!(text.contains("cargo xtask install-azurite"), "{text}");
}

#[test]
fn an_oauth_emulator_serves_https_with_an_authority_of_its_own_and_leaves_nothing_behind() {
    let azurite = Azurite::builder().with_oauth().start().unwrap();
    assert!(azurite.uses_oauth());
    let e = azurite.endpoints();
    for endpoint in [&e.blob, &e.queue, &e.table] {
        assert!(endpoint.starts_with("https://127.0.0.1:"), "{endpoint}");
    }
    assert!(
        azurite
            .connection_string()
            .starts_with("DefaultEndpointsProtocol=https;")
    );
    let pem = azurite.ca_certificate_pem().unwrap().to_owned();
    let path = azurite.ca_certificate_path().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), pem);
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    // Another emulator gets another authority.
    let other = Azurite::builder().with_oauth().start().unwrap();
    assert_ne!(other.ca_certificate_pem().unwrap(), pem);
    let dir = path.parent().unwrap().to_owned();
    assert!(dir.join("key.pem").is_file());
    let pid = azurite.pid().unwrap();
    drop(azurite);
    assert!(wait_gone(pid, Duration::from_secs(5)));
    assert!(
        !dir.exists(),
        "the certificates are removed with the emulator"
    );
    let plain = Azurite::start().unwrap();
    assert!(!plain.uses_oauth() && plain.ca_certificate_pem().is_none());
}

#[test]
fn ports_another_process_listens_on_do_not_pass_for_a_ready_emulator() {
    // Another process holds all three ports and accepts connections on them, as a second
    // emulator that won the race for a free port does: the emulator started on them cannot
    // bind, and its start must fail rather than hand out the other process's endpoints.
    let others: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = others
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let err = Azurite::builder()
        .with_ports(ports[0], ports[1], ports[2])
        .start()
        .unwrap_err();
    let text = one_line(&err);
    assert!(
        matches!(err, AzuriteError::Exited { .. }) && text.contains("EADDRINUSE"),
        "{text}"
    );
}
