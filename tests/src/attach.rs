//! The attach-mode collector (`mlprof-collect --out OUT --session NAME`), started and waited
//! for on its `session 'NAME' ready` line.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Instant;

use crate::child::{clean_env, default_timeout, watchdog};
use crate::locations::bins;

/// A `mlprof-collect --out OUT --session NAME` process serving a session.
pub struct AttachCollector {
    child: Option<Child>,
    pub session: String,
    pub out: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl AttachCollector {
    /// Starts the collector and returns once it printed `session 'NAME' ready`.
    pub fn start(out: &Path, session: &str) -> AttachCollector {
        Self::start_with_args(out, session, &[])
    }

    /// Like [`AttachCollector::start`] with extra options (`--lanes 4`, `--lane-records 64`, ...).
    pub fn start_with_args(out: &Path, session: &str, args: &[&str]) -> AttachCollector {
        let mut cmd = Command::new(&bins().collect);
        clean_env(&mut cmd);
        cmd.arg("--out").arg(out).arg("--session").arg(session).args(args);
        Self::start_command(cmd, out, session)
    }

    /// Like [`AttachCollector::start`] with a command line of the caller's, which runs
    /// `mlprof-collect --out OUT --session NAME` its own way (as another user through
    /// `setpriv`, with `MLPROF_SHM_DIR`); its stdio and process group are set here.
    pub fn start_command(mut cmd: Command, out: &Path, session: &str) -> AttachCollector {
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let sink = Arc::clone(&lines);
        let reader = thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut c = AttachCollector {
            child: Some(child),
            session: session.to_string(),
            out: out.to_path_buf(),
            lines,
            reader: Some(reader),
        };
        let want = format!("session '{session}' ready");
        let deadline = Instant::now() + default_timeout();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(&want) => break,
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("collector did not print {want:?} in time; stderr:\n{}", c.stderr())
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = c.child.as_mut().and_then(|ch| ch.wait().ok());
                    panic!(
                        "collector closed stderr before printing {want:?} (status {status:?}); stderr:\n{}",
                        c.stderr()
                    )
                }
            }
        }
        c
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("collector running").id()
    }

    /// Everything the collector printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Stderr lines so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn signal_and_wait(&mut self, sig: i32) -> ExitStatus {
        let mut child = self.child.take().expect("collector running");
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let (tx, dog) = watchdog(child.id(), default_timeout());
        let status = child.wait().expect("wait for collector");
        drop(tx);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if dog.join().unwrap_or(false) {
            panic!(
                "collector did not exit within {:?} after signal {sig}; stderr:\n{}",
                default_timeout(),
                self.stderr()
            );
        }
        status
    }

    /// SIGINT, wait, and return the exit status (stderr stays readable).
    pub fn stop(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGINT)
    }

    /// SIGINT, wait, and assert a clean exit 0 and a written run file.
    pub fn stop_ok(&mut self) {
        let st = self.stop();
        assert!(st.success(), "attach collector exited with {st:?} after SIGINT; stderr:\n{}", self.stderr());
        assert!(self.out.is_file(), "collector did not write {}", self.out.display());
    }

    /// SIGKILL and wait.
    pub fn kill9(&mut self) -> ExitStatus {
        self.signal_and_wait(libc::SIGKILL)
    }
}

impl Drop for AttachCollector {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
