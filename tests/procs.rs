//! Real `paraforge` processes for the tests that stop, kill and pause them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::paraforge_bin;

/// A child process killed when dropped, so a failing test leaves none.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Sends a signal by name (TERM, KILL, STOP, CONT).
    pub fn signal(&self, sig: &str) {
        let n = match sig {
            "TERM" => libc::SIGTERM,
            "KILL" => libc::SIGKILL,
            "STOP" => libc::SIGSTOP,
            "CONT" => libc::SIGCONT,
            other => panic!("unknown signal {other}"),
        };
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, n) };
        assert_eq!(r, 0, "kill -{sig} {}", self.name);
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits for the exit; returns the status and what it printed.
    pub fn wait(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                if let Some(mut o) = self.child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                return (st, out);
            }
            assert!(
                t.elapsed() < limit,
                "{} did not exit within {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts `paraforge coordinator`; returns it and its gRPC URL (the one
/// the line it prints when it is serving names, after the line naming its
/// pages).
pub fn coordinator(config: &Path) -> (Proc, String) {
    let child = Command::new(paraforge_bin())
        .args(["coordinator", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting paraforge coordinator");
    // Owned first, so that a panic below kills it.
    let mut proc = Proc {
        child,
        name: "coordinator".into(),
    };
    let mut out = BufReader::new(proc.child.stdout.take().unwrap());
    let mut said = String::new();
    let url = loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("coordinator ended saying {said:?}");
        }
        said.push_str(&line);
        let url = line
            .split(" on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"));
        if let Some(u) = url {
            break u.to_string();
        }
    };
    // What it prints later is for `wait`.
    proc.child.stdout = Some(out.into_inner());
    (proc, url)
}

/// Starts `paraforge worker` against `url`.
pub fn worker(url: &str, name: &str) -> Proc {
    let child = Command::new(paraforge_bin())
        .args(["worker", "--coordinator", url, "--name", name])
        .args(["--connect-attempts", "60"])
        .stdout(Stdio::piped())
        // PARAFORGE_TEST_WORKER_LOGS=1 shows the workers' logs (to debug a round).
        .stderr(
            if std::env::var_os("PARAFORGE_TEST_WORKER_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            },
        )
        .spawn()
        .expect("starting paraforge worker");
    Proc {
        child,
        name: name.to_string(),
    }
}

/// `N` distinct TCP ports free right now on loopback, for a process to
/// bind as fixed addresses. Every address of a process is fixed this way:
/// one left at port 0 may be handed the port just picked for another (the
/// soak lost a round to that on 2026-11-29: the coordinator's pages, bound
/// first at port 0, took the gRPC port the test had picked, and its gRPC
/// side then found it in use).
pub fn free_ports<const N: usize>() -> [u16; N] {
    // All held at once, so that no two are the same port.
    let held: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// A TCP port free right now on loopback.
pub fn free_port() -> u16 {
    let [p] = free_ports();
    p
}
