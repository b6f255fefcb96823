//! The emulator's ceiling, measured: the CPU the Azurite process used during each workload,
//! sampled from `/proc/<pid>/stat` before and after it. Azurite serves requests on one Node.js
//! thread, so one core is its ceiling: a workload whose emulator ran near 1.0 core measured
//! the emulator as much as the client, and its ratios say how the two clients compare at that
//! ceiling, not how fast either could go against Azure.

use std::time::{Duration, Instant};

use serde::Serialize;

/// One workload's emulator load.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EmulatorLoad {
    pub(crate) workload: String,
    /// Seconds the workload ran.
    pub(crate) seconds: f64,
    /// The emulator's CPU time over the workload's time: cores busy on average.
    pub(crate) cores: f64,
}

impl EmulatorLoad {
    /// The load as a fraction of the emulator's one-core ceiling.
    pub(crate) fn of_ceiling(&self) -> f64 {
        self.cores / CEILING_CORES
    }
}

/// The cores the emulator can use for requests: one Node.js event loop.
pub(crate) const CEILING_CORES: f64 = 1.0;

/// The CPU time (user + system) process `pid` has used, from `/proc/<pid>/stat`; `None` where
/// there is no such file (not Linux, or the process is gone).
pub(crate) fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_from_stat(&stat, clock_ticks_per_second())
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks of `hz`.
/// The command name (field 2) is in parentheses and may hold spaces: fields are counted from
/// the last `)`.
fn cpu_from_stat(stat: &str, hz: u64) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state): utime is field 14, at index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_secs_f64(ticks as f64 / hz.max(1) as f64))
}

fn clock_ticks_per_second() -> u64 {
    // USER_HZ, the unit of /proc/<pid>/stat: 100 on every Linux architecture tablekit runs.
    100
}

/// Measures the emulator while a workload runs.
pub(crate) struct Sampler {
    pid: Option<u32>,
    cpu: Option<Duration>,
    started: Instant,
}

impl Sampler {
    /// Starts measuring process `pid` (the emulator; `None` when it is not a child of this
    /// process, e.g. external storage).
    pub(crate) fn start(pid: Option<u32>) -> Self {
        Self {
            pid,
            cpu: pid.and_then(process_cpu),
            started: Instant::now(),
        }
    }

    /// The load since [`Sampler::start`], named `workload`; `None` when the process could not
    /// be read.
    pub(crate) fn finish(self, workload: &str) -> Option<EmulatorLoad> {
        let before = self.cpu?;
        let after = process_cpu(self.pid?)?;
        let seconds = self.started.elapsed().as_secs_f64();
        Some(EmulatorLoad {
            workload: workload.to_owned(),
            seconds,
            cores: (after.saturating_sub(before)).as_secs_f64() / seconds.max(1e-9),
        })
    }
}

/// The loads as a markdown section.
pub(crate) fn section(loads: &[EmulatorLoad]) -> String {
    let mut out = String::from(
        "\nThe emulator's ceiling: Azurite's CPU during each workload (user + system time over the \
         workload's time), as a fraction of the one core its Node.js event loop can use. Near \
         1.0, the emulator was the bottleneck of that workload.\n\n\
         | Workload | seconds | emulator cores | of its ceiling |\n|---|---|---|---|\n",
    );
    for l in loads {
        out.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.0} % |\n",
            l.workload,
            l.seconds,
            l.cores,
            100.0 * l.of_ceiling()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_utime_plus_stime_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, as /proc allows.
        let stat = "4242 (node (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 11 0 \
                    100 0 0";
        assert_eq!(cpu_from_stat(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(cpu_from_stat("garbage", 100), None);
        assert_eq!(cpu_from_stat("1 (a) S 1", 100), None);
    }

    #[test]
    fn a_sampler_sees_the_cpu_its_process_used() {
        let me = std::process::id();
        let before = process_cpu(me).expect("own /proc entry");
        let sampler = Sampler::start(Some(me));
        // Spin until the process has used 50 ms more CPU (ticks are 10 ms), however busy the
        // machine.
        let mut x = 0u64;
        while process_cpu(me).expect("own /proc entry") < before + Duration::from_millis(50) {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let load = sampler.finish("spin").expect("own /proc entry");
        assert!(load.cores > 0.0 && load.seconds > 0.0, "{load:?}");
        assert!(Sampler::start(None).finish("none").is_none());
    }
}
