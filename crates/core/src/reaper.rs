//! Process trees that end with what started them: a run_bash command, an external ACP agent.
//!
//! A process group is not enough: `setsid`, `set -m`, `setpgid(0, 0)`, coreutils `timeout`,
//! `tmux new -d` and `start-stop-daemon --background` all leave it, and a double fork leaves the
//! parent chain too. On Linux this module makes the backend a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so every orphan below it is reparented to the backend instead of
//! init, and follows each tree through `/proc`:
//!
//! - every process is spawned by one long-lived thread (`agent-nvim-reaper`), which keeps a
//!   registry of what it spawned (the trees' roots); the child gets `PR_SET_PDEATHSIG` (SIGKILL),
//!   which fires when the *thread* that forked it exits, so that thread never does;
//! - each tree's processes carry `AGENT_NVIM_TREE={backend pid}:{tree}` in their environment,
//!   which descendants inherit;
//! - the backend's direct children are the roots it spawned and the orphans it adopted; an orphan
//!   belongs to the tree it was seen in while its parent lived (a scan every [`TICK`] while a tree
//!   is running), else to the tree its `AGENT_NVIM_TREE` names, else to the tree whose root's
//!   process group it is still in; a tree's members are everything below its root and its
//!   adopted orphans (`/proc/PID/task/*/children`);
//! - ending a tree stops every member (SIGSTOP, scanning again until no new member shows up, so a
//!   fork racing the kill is caught), then SIGKILLs them all until none is left, and reaps the
//!   zombies of the orphans it adopted, by pid: never `waitpid(-1)`, which would steal tokio's
//!   children's statuses (tokio reaps its own, by pid or pidfd).
//!
//! What escapes: a process that clears its environment and leaves both its parent and its group
//! within one [`TICK`] (in the `agent-nvim` binary, where [`claim_orphans`] is on, only while two
//! trees run at once), and a process handed to a daemon that is not our descendant (a tmux
//! server started before the backend). cgroups would close both holes but
//! need a writable cgroup v2 hierarchy, which most users' sessions do not grant; this path needs
//! nothing but `/proc`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// The environment variable naming a process's tree.
pub const TREE_VAR: &str = "AGENT_NVIM_TREE";
/// How often running trees are scanned, to learn members before they are orphaned.
const TICK: Duration = Duration::from_millis(200);
/// Scans of the stop phase before giving up on stopping and killing anyway.
const STOP_ROUNDS: usize = 64;
/// The longest an end waits for killed processes to be gone (a process in uninterruptible sleep
/// may take longer; it is left to the next tick).
const KILL_LIMIT: Duration = Duration::from_secs(2);
/// The longest pause between two looks at processes that were sent SIGKILL.
const KILL_POLL_MAX: Duration = Duration::from_millis(32);

type Pid = libc::pid_t;

static NEXT_TREE: AtomicU64 = AtomicU64::new(1);
static CLAIM: AtomicBool = AtomicBool::new(false);
static JOBS: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

/// Declares that this process starts children only through [`spawn`], so every child it did not
/// spawn is an orphan adopted from one of its trees: one that carries no tree is given to the only
/// running tree, killed when no tree runs, and its zombie reaped. The `agent-nvim` binary turns
/// this on; a test binary, whose tests start processes of their own, must not.
pub fn claim_orphans() {
    CLAIM.store(true, Ordering::SeqCst);
}

/// Ends every tree still running and waits (at most a few seconds) until that is done: for the
/// binary's exit, when a tree dropped at the last moment (a runtime shut down with a task still
/// holding an ACP session) would otherwise only have queued its end.
pub fn end_all() {
    if JOBS.get().is_none() {
        return;
    }
    let (reply, done) = mpsc::channel();
    if send(Job::EndAll { reply }) {
        let _ = done.recv_timeout(KILL_LIMIT + Duration::from_secs(1));
    }
}

/// A spawned tree. Ending it (or dropping it) kills every process in it that is still running.
#[derive(Debug)]
pub struct Tree {
    id: u64,
    ended: AtomicBool,
}

impl Tree {
    /// Kills whatever of the tree still runs and returns once it is gone (or after
    /// [`KILL_LIMIT`]). The root is killed too when it is still running.
    pub async fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        let (reply, done) = oneshot::channel();
        if send(Job::End {
            tree: self.id,
            reply: Some(reply),
        }) {
            let _ = done.await;
        }
    }

    /// Like [`Tree::end`], without waiting.
    pub fn end_soon(&self) {
        if !self.ended.swap(true, Ordering::SeqCst) {
            send(Job::End {
                tree: self.id,
                reply: None,
            });
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.end_soon();
    }
}

/// Spawns `command` as the root of a new tree, from the reaper thread, with `PR_SET_PDEATHSIG`.
/// The caller keeps the usual tokio [`Child`] (tokio reaps it) and the [`Tree`] that ends it.
pub async fn spawn(mut command: Command) -> io::Result<(Child, Tree)> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let id = NEXT_TREE.fetch_add(1, Ordering::SeqCst);
    let me = std::process::id();
    command.env(TREE_VAR, format!("{me}:{id}"));
    #[cfg(target_os = "linux")]
    {
        let parent = Pid::try_from(me).unwrap_or(0);
        // SAFETY: the closure runs in the forked child before exec and only makes two system
        // calls, both async-signal-safe; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The backend may have died before the signal was armed.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    let tree = Tree {
        id,
        ended: AtomicBool::new(false),
    };
    let (reply, spawned) = oneshot::channel();
    if !send(Job::Spawn {
        command: Box::new(command),
        tree: id,
        runtime,
        reply,
    }) {
        return Err(io::Error::other("the process reaper thread is not running"));
    }
    let child = spawned
        .await
        .map_err(|_| io::Error::other("the process reaper thread stopped"))??;
    Ok((child, tree))
}

enum Job {
    Spawn {
        command: Box<Command>,
        tree: u64,
        runtime: tokio::runtime::Handle,
        reply: oneshot::Sender<io::Result<Child>>,
    },
    End {
        tree: u64,
        reply: Option<oneshot::Sender<()>>,
    },
    EndAll {
        reply: mpsc::Sender<()>,
    },
}

/// Hands `job` to the reaper thread, starting it (and becoming a subreaper) the first time.
fn send(job: Job) -> bool {
    let jobs = JOBS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        // SAFETY: prctl with integer arguments; it only sets a flag of this process.
        unsafe {
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
                tracing::warn!(
                    "cannot become a child subreaper: {}",
                    io::Error::last_os_error()
                );
            }
        }
        let (tx, rx) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("agent-nvim-reaper".into())
            .spawn(move || Reaper::new().serve(&rx));
        match started {
            Ok(_) => Some(tx),
            Err(err) => {
                tracing::error!("cannot start the process reaper thread: {err}");
                None
            }
        }
    });
    jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok())
}

/// One process, told apart from a later one with the same pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Proc {
    pid: Pid,
    start: u64,
}

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone, Copy)]
struct Stat {
    state: u8,
    ppid: Pid,
    pgrp: Pid,
    start: u64,
}

impl Stat {
    fn read(pid: Pid) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The name is in parentheses and may itself contain ')' or spaces.
        let (_, rest) = text.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(Stat {
            state: fields.first()?.bytes().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            pgrp: fields.get(2)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }

    /// Exited, not yet reaped (or being torn down).
    fn dead(self) -> bool {
        matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// The pids of `pid`'s children: from `/proc/PID/task/*/children` (every thread's, since a child
/// belongs to the thread that forked it and an orphan to any thread of its new parent), or, on a
/// kernel without that file, from a scan of every process's parent.
fn children(pid: Pid, by_parent: &Option<HashMap<Pid, Vec<Pid>>>) -> Vec<Pid> {
    if let Some(map) = by_parent {
        return map.get(&pid).cloned().unwrap_or_default();
    }
    let mut found = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for task in tasks.flatten() {
        found.extend(children_file(&task.path().join("children")));
    }
    found
}

/// The pids a `/proc/PID/task/TID/children` file lists (none when it cannot be read).
fn children_file(path: &Path) -> Vec<Pid> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse::<Pid>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The pid of every process on the machine, from `/proc`.
fn all_pids() -> impl Iterator<Item = Pid> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<Pid>().ok())
}

/// Every process's children by a full scan: the fallback where `children` files are missing.
fn parent_map() -> HashMap<Pid, Vec<Pid>> {
    let mut map: HashMap<Pid, Vec<Pid>> = HashMap::new();
    for pid in all_pids() {
        if let Some(stat) = Stat::read(pid) {
            map.entry(stat.ppid).or_default().push(pid);
        }
    }
    map
}

/// The calling thread's id (`/proc/thread-self` is `PID/task/TID`), or 0.
fn thread_id() -> Pid {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| link.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// The tree named by `pid`'s `AGENT_NVIM_TREE`, when it names one of this backend's.
fn marker(pid: Pid, me: Pid) -> Option<u64> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{TREE_VAR}={me}:");
    environ.split(|b| *b == 0).find_map(|entry| {
        let value = entry.strip_prefix(prefix.as_bytes())?;
        std::str::from_utf8(value).ok()?.parse().ok()
    })
}

/// Sends `signal` to `pid`. False only when we may not signal it (EPERM: it changed its user,
/// as `sudo` does); a pid that is already gone (ESRCH) counts as sent.
fn signal(pid: Pid, signal: libc::c_int) -> bool {
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill(2) with plain integers.
    let sent = unsafe { libc::kill(pid, signal) } == 0;
    sent || io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
}

/// Reaps `pid` if it is a zombie; never blocks, never waits for any other pid.
fn reap(pid: Pid) {
    let mut status = 0;
    // SAFETY: waitpid on one pid that is our adopted child, with WNOHANG; `status` is ours.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// Who a direct child of the backend belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// A root we spawned (tokio reaps it; never waited for here).
    Root(u64),
    /// An orphan adopted from this tree (which may have ended).
    Orphan(u64),
    /// An adopted orphan that carries no tree and was never seen.
    Unknown,
}

/// The reaper thread's state; nothing else touches it.
struct Reaper {
    me: Pid,
    /// Running trees and their roots.
    trees: HashMap<u64, Proc>,
    /// Roots still present (alive or zombie), by pid, until tokio has reaped them.
    roots: HashMap<Pid, (Proc, u64)>,
    /// Processes seen inside a tree, so an orphan keeps its tree after its parent is gone.
    seen: HashMap<Proc, u64>,
    /// This thread's id: the parent of every root.
    tid: Pid,
    /// Whether `/proc/PID/task/*/children` exists on this kernel.
    children_files: bool,
}

impl Reaper {
    fn new() -> Self {
        Reaper {
            me: Pid::try_from(std::process::id()).unwrap_or(0),
            trees: HashMap::new(),
            roots: HashMap::new(),
            seen: HashMap::new(),
            tid: thread_id(),
            children_files: Path::new("/proc/thread-self/children").exists(),
        }
    }

    fn serve(mut self, jobs: &mpsc::Receiver<Job>) {
        let mut last_tick = Instant::now();
        loop {
            let job = if self.trees.is_empty() {
                jobs.recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                jobs.recv_timeout(TICK.saturating_sub(last_tick.elapsed()))
            };
            match job {
                Ok(job) => self.handle(job, jobs),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if !self.trees.is_empty() && last_tick.elapsed() >= TICK {
                self.tick();
                last_tick = Instant::now();
            }
        }
    }

    fn handle(&mut self, job: Job, jobs: &mpsc::Receiver<Job>) {
        match job {
            Job::Spawn {
                mut command,
                tree,
                runtime,
                reply,
            } => {
                let result = {
                    let _context = runtime.enter();
                    command.spawn()
                };
                if let Ok(child) = &result {
                    let pid = child.id().and_then(|pid| Pid::try_from(pid).ok());
                    // Without /proc (not Linux) the start time is unknown; the root is still
                    // registered, so its group is killed when the tree ends.
                    let started = pid.and_then(|pid| {
                        let start = Stat::read(pid).map(|stat| stat.start);
                        #[cfg(not(target_os = "linux"))]
                        let start = start.or(Some(0));
                        Some((pid, start?))
                    });
                    if let Some((pid, start)) = started {
                        let root = Proc { pid, start };
                        self.trees.insert(tree, root);
                        self.roots.insert(pid, (root, tree));
                    }
                }
                // If the caller is gone, the child drops here and tokio kills it; the caller's
                // Tree has queued the end of the tree behind this job.
                let _ = reply.send(result);
            }
            Job::End { tree, reply } => {
                // Ends queued together (a batch of timeouts) are done together: one scan a
                // round for all of them instead of one each. A spawn stops the batch, so it
                // still comes after the ends queued before it and before those after it.
                let mut trees = HashSet::from([tree]);
                let mut replies: Vec<_> = reply.into_iter().collect();
                let mut next = None;
                while let Ok(job) = jobs.try_recv() {
                    match job {
                        Job::End { tree, reply } => {
                            trees.insert(tree);
                            replies.extend(reply);
                        }
                        other @ (Job::Spawn { .. } | Job::EndAll { .. }) => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                self.end(&trees);
                for reply in replies {
                    let _ = reply.send(());
                }
                if let Some(job) = next {
                    self.handle(job, jobs);
                }
            }
            Job::EndAll { reply } => {
                let trees: HashSet<u64> = self.trees.keys().copied().collect();
                self.end(&trees);
                let _ = reply.send(());
            }
        }
    }

    fn by_parent(&self) -> Option<HashMap<Pid, Vec<Pid>>> {
        (!self.children_files).then(parent_map)
    }

    fn owner(&self, proc: Proc, stat: Stat) -> Owner {
        if let Some((root, tree)) = self.roots.get(&proc.pid) {
            if *root == proc {
                return Owner::Root(*tree);
            }
        }
        if let Some(tree) = self.seen.get(&proc) {
            return Owner::Orphan(*tree);
        }
        if let Some(tree) = marker(proc.pid, self.me) {
            return Owner::Orphan(tree);
        }
        // Still in a running root's process group (its pgid is the root's pid, which the kernel
        // does not hand out again while the group has members).
        self.trees
            .iter()
            .find(|(_, root)| root.pid == stat.pgrp)
            .map_or(Owner::Unknown, |(tree, _)| Owner::Orphan(*tree))
    }

    /// The backend's direct children. A child hangs off the thread that forked it, and an orphan
    /// off the first live thread of its new parent (the kernel's `find_alive_thread`), which is
    /// the main thread; a thread that exits hands its children to the main thread too. So the
    /// main thread and this one (every spawn's) hold them all, and the other threads' files
    /// (dozens in a test binary) need not be read at every scan.
    fn direct_pids(&self, by_parent: &Option<HashMap<Pid, Vec<Pid>>>) -> Vec<Pid> {
        if by_parent.is_some() {
            return children(self.me, by_parent);
        }
        let mut pids = Vec::new();
        for tid in [self.me, self.tid] {
            let file = format!("/proc/{}/task/{tid}/children", self.me);
            pids.extend(children_file(Path::new(&file)));
            if self.tid == self.me {
                break;
            }
        }
        pids
    }

    /// The backend's direct children, with their state and owner. An orphan's owner is kept in
    /// `seen`, so its environment is read once, not at every scan of a kill.
    fn direct(&mut self, by_parent: &Option<HashMap<Pid, Vec<Pid>>>) -> Vec<(Proc, Stat, Owner)> {
        let mut found = Vec::new();
        for pid in self.direct_pids(by_parent) {
            let Some(stat) = Stat::read(pid) else {
                continue;
            };
            let proc = Proc {
                pid,
                start: stat.start,
            };
            let owner = self.owner(proc, stat);
            if let Owner::Orphan(tree) = owner {
                self.seen.insert(proc, tree);
            }
            found.push((proc, stat, owner));
        }
        found
    }

    /// The tree an adopted orphan is counted in: its own, or (when orphans are claimed) the only
    /// running tree for one that carries none.
    fn orphan_tree(&self, owner: Owner) -> Option<u64> {
        match owner {
            Owner::Orphan(tree) => Some(tree),
            Owner::Unknown if CLAIM.load(Ordering::SeqCst) && self.trees.len() == 1 => {
                self.trees.keys().next().copied()
            }
            Owner::Root(_) | Owner::Unknown => None,
        }
    }

    /// The living processes of `trees`, each with its tree: each tree's root (while it runs),
    /// its adopted orphans, and all their descendants. Each is remembered in `seen`. One scan
    /// serves any number of trees, so trees ending together share it.
    fn members(&mut self, trees: &HashSet<u64>) -> Vec<(Proc, u64)> {
        let by_parent = self.by_parent();
        let direct = self.direct(&by_parent);
        self.members_among(&direct, &by_parent, trees)
    }

    /// [`Reaper::members`], from a scan of the backend's direct children already made.
    fn members_among(
        &mut self,
        direct: &[(Proc, Stat, Owner)],
        by_parent: &Option<HashMap<Pid, Vec<Pid>>>,
        trees: &HashSet<u64>,
    ) -> Vec<(Proc, u64)> {
        let mut queue: Vec<(Pid, u64)> = Vec::new();
        for &(proc, stat, owner) in direct {
            let tree = match owner {
                Owner::Root(tree) => Some(tree),
                other => self.orphan_tree(other),
            };
            if let Some(tree) = tree.filter(|tree| trees.contains(tree)) {
                if !stat.dead() {
                    queue.push((proc.pid, tree));
                }
            }
        }
        let mut found = Vec::new();
        let mut visited = HashSet::new();
        while let Some((pid, tree)) = queue.pop() {
            if !visited.insert(pid) {
                continue;
            }
            let Some(stat) = Stat::read(pid) else {
                continue;
            };
            if stat.dead() {
                continue;
            }
            let proc = Proc {
                pid,
                start: stat.start,
            };
            self.seen.insert(proc, tree);
            found.push((proc, tree));
            queue.extend(
                children(pid, by_parent)
                    .into_iter()
                    .map(|child| (child, tree)),
            );
        }
        found
    }

    /// Stops, then kills, every member of `trees` until none is left; reaps what they adopted;
    /// forgets them.
    fn end(&mut self, trees: &HashSet<u64>) {
        let trees: HashSet<u64> = trees
            .iter()
            .copied()
            .filter(|tree| self.trees.contains_key(tree))
            .collect();
        if trees.is_empty() {
            return;
        }
        // Without /proc there is only each root's process group (its pgid is its pid).
        #[cfg(not(target_os = "linux"))]
        for tree in &trees {
            if let Some(root) = self.trees.get(tree) {
                if self.roots.contains_key(&root.pid) && root.pid > 0 {
                    // SAFETY: kill(2) with plain integers; a negative pid names the group.
                    unsafe { libc::kill(-root.pid, libc::SIGKILL) };
                }
            }
        }
        self.kill(&trees);
        self.trees.retain(|tree, _| !trees.contains(tree));
        self.reap_zombies();
        self.seen.retain(|_, owner| !trees.contains(owner));
        if self.trees.is_empty() {
            // Nothing runs that could own a leftover: a last look for anything still marked.
            self.tick();
        }
    }

    fn kill(&mut self, trees: &HashSet<u64>) {
        // Stopped processes cannot fork, and none of them dies, so no child is orphaned while
        // the tree is being read: scan until a scan finds nothing new to stop.
        let mut stopped = HashSet::new();
        for _ in 0..STOP_ROUNDS {
            let fresh: Vec<Proc> = self
                .members(trees)
                .into_iter()
                .map(|(proc, _)| proc)
                .filter(|proc| !stopped.contains(proc))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for proc in fresh {
                signal(proc.pid, libc::SIGSTOP);
                stopped.insert(proc);
            }
        }
        for proc in &stopped {
            signal(proc.pid, libc::SIGKILL);
        }
        // A process we may not signal is not waited for: it would only hold the call up.
        let mut forbidden = HashSet::new();
        let deadline = Instant::now() + KILL_LIMIT;
        // Killed processes are usually gone within a millisecond; one that is not (stuck in the
        // kernel) is looked at less and less often, not rescanned every millisecond for 2 s.
        let mut pause = Duration::from_millis(1);
        loop {
            std::thread::sleep(pause);
            pause = (pause * 2).min(KILL_POLL_MAX);
            let members: Vec<(Proc, u64)> = self
                .members(trees)
                .into_iter()
                .filter(|(proc, _)| !forbidden.contains(proc))
                .collect();
            if members.is_empty() {
                if !forbidden.is_empty() {
                    tracing::warn!(
                        left = forbidden.len(),
                        "processes of another user cannot be killed"
                    );
                }
                return;
            }
            for (proc, _) in &members {
                if !signal(proc.pid, libc::SIGKILL) {
                    forbidden.insert(*proc);
                }
            }
            if Instant::now() > deadline {
                tracing::warn!(
                    left = members.len(),
                    "processes did not die within {KILL_LIMIT:?} of SIGKILL"
                );
                return;
            }
        }
    }

    /// Reaps every zombie among the orphans the backend adopted (never a root: tokio reaps
    /// those). An orphan is known by its tree, or, when orphans are claimed, by not being a root.
    fn reap_zombies(&mut self) {
        let by_parent = self.by_parent();
        let direct = self.direct(&by_parent);
        self.reap_among(&direct);
    }

    /// [`Reaper::reap_zombies`], from a scan of the backend's direct children already made.
    fn reap_among(&mut self, direct: &[(Proc, Stat, Owner)]) {
        let claim = CLAIM.load(Ordering::SeqCst);
        for &(proc, stat, owner) in direct {
            let adopted = match owner {
                Owner::Root(_) => false,
                Owner::Orphan(_) => true,
                Owner::Unknown => claim,
            };
            if adopted && stat.dead() {
                reap(proc.pid);
                self.seen.remove(&proc);
            }
        }
    }

    /// The periodic look: learn every running tree's members, reap adopted zombies, kill orphans
    /// of trees that have ended, and forget roots tokio has reaped.
    /// One scan of the backend's direct children serves all three.
    fn tick(&mut self) {
        let trees: HashSet<u64> = self.trees.keys().copied().collect();
        let by_parent = self.by_parent();
        let direct = self.direct(&by_parent);
        let seen: HashMap<Proc, u64> = self
            .members_among(&direct, &by_parent, &trees)
            .into_iter()
            .collect();
        self.reap_among(&direct);
        let leftovers: Vec<Proc> = direct
            .into_iter()
            .filter(|(_, stat, owner)| {
                !stat.dead()
                    && match *owner {
                        Owner::Root(_) => false,
                        Owner::Orphan(tree) => !self.trees.contains_key(&tree),
                        Owner::Unknown => CLAIM.load(Ordering::SeqCst) && self.trees.is_empty(),
                    }
            })
            .map(|(proc, _, _)| proc)
            .collect();
        if !leftovers.is_empty() {
            // An orphan of an ended tree (it slipped past the end, or escaped its
            // attribution): end it as a tree of its own.
            const LEFTOVERS: u64 = 0;
            for proc in &leftovers {
                self.seen.insert(*proc, LEFTOVERS);
            }
            self.trees.insert(LEFTOVERS, Proc { pid: 0, start: 0 });
            self.kill(&HashSet::from([LEFTOVERS]));
            self.trees.remove(&LEFTOVERS);
            self.reap_zombies();
            self.seen.retain(|_, owner| *owner != LEFTOVERS);
        }
        self.seen = seen;
        self.roots
            .retain(|pid, (root, _)| Stat::read(*pid).is_some_and(|s| s.start == root.start));
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]
mod tests {
    use super::*;
    use crate::approved::Approved;
    use crate::process::{CommandOutput, CommandSpec, Ending};
    use std::path::PathBuf;
    use std::sync::atomic::AtomicUsize;
    use std::time::SystemTime;
    use tokio_util::sync::CancellationToken;

    /// [`crate::process::run`] as run_bash's approved step calls it.
    async fn run(spec: &CommandSpec, cancel: &CancellationToken) -> io::Result<CommandOutput> {
        crate::process::run(spec, &Approved::for_tests(), cancel).await
    }

    /// How long after the command's end (its shell's last line, the timeout, the cancel) the call
    /// may return. The old group kill failed it by the 2 s drain grace whenever a survivor held
    /// the pipe; the target is 0.5 s (figures in BENCHMARKS.md).
    const RETURN_BOUND: Duration = Duration::from_millis(1_500);

    /// A marker no other process on the machine has in its arguments.
    fn marker(case: &str) -> String {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        format!("agentnvimreap{}x{n}x{nanos}{case}", std::process::id())
    }

    /// Running processes with `marker` in their arguments (a zombie's are empty).
    /// `marker` as shell text that does not contain it (`ab""cd` for `abcd`), for a test that
    /// counts the processes carrying it while the shells that started them still run: their
    /// command lines must not count.
    fn unspelled(marker: &str) -> String {
        let (head, tail) = marker.split_at(marker.len() / 2);
        format!("{head}\"\"{tail}")
    }

    fn with_marker(marker: &str) -> Vec<Pid> {
        all_pids()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
            })
            .collect()
    }

    fn on_path(tool: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
    }

    /// The escapes, each starting processes that carry `m` in their arguments and hold
    /// the output pipe (except start-stop-daemon's, which points its stdio at /dev/null), with the
    /// tools each needs.
    fn escapes(m: &str, dir: &Path) -> Vec<(&'static str, String, &'static [&'static str])> {
        let pidfile = dir.join("daemon.pid");
        let socket = dir.join("tmux.sock");
        vec![
            (
                "setsid &",
                format!("setsid bash -c 'exec -a {m} sleep 1000' &"),
                &["setsid"],
            ),
            (
                "setsid -f",
                format!("setsid -f bash -c 'exec -a {m} sleep 1000'"),
                &["setsid"],
            ),
            (
                "python double fork with setsid",
                format!(
                    "python3 -c 'import os, time\nif os.fork(): os._exit(0)\nos.setsid()\n\
                     if os.fork(): os._exit(0)\ntime.sleep(1000)' {m}"
                ),
                &["python3"],
            ),
            (
                "set -m",
                format!("set -m; bash -c 'exec -a {m} sleep 1000' &"),
                &[],
            ),
            (
                "setpgid(0, 0)",
                format!("python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(1000)' {m} &"),
                &["python3"],
            ),
            (
                "coreutils timeout",
                format!("timeout 999 bash -c 'exec -a {m} sleep 1000' &"),
                &["timeout"],
            ),
            (
                "tmux new -d",
                format!(
                    "tmux -S {} -f /dev/null new -d 'exec -a {m} sleep 1000'",
                    socket.display()
                ),
                &["tmux"],
            ),
            (
                "start-stop-daemon --background",
                format!(
                    "start-stop-daemon --start --background --pidfile {} --make-pidfile \
                     --startas /bin/bash -- -c 'exec -a {m} sleep 1000'",
                    pidfile.display()
                ),
                &["start-stop-daemon"],
            ),
            (
                "a loop detaching a process every 10 ms",
                format!(
                    "bash -c 'while :; do setsid -f bash -c \"exec -a {m} sleep 1000\"; \
                     sleep 0.01; done' {m} &"
                ),
                &["setsid"],
            ),
        ]
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum End {
        Exit,
        Timeout,
        Cancel,
    }

    fn now_nanos() -> u128 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }

    /// Runs one escape ended by `end`; returns how long after the command's end the call
    /// returned, and the survivors found by the marker (killed before returning).
    async fn escape(launch: &str, m: &str, dir: &Path, end: End) -> (Duration, Vec<Pid>) {
        let ready = dir.join("ready");
        // A moment for the daemons to settle, then the end: the shell's last line, or a file
        // that tells the test the escape is in place.
        let command = match end {
            End::Exit => format!("{launch}\nsleep 0.3; date +%s%N"),
            End::Timeout | End::Cancel => {
                format!(
                    "{launch}\nsleep 0.3; touch '{}'; sleep 1000",
                    ready.display()
                )
            }
        };
        let timeout = match end {
            End::Timeout => Duration::from_secs(3),
            End::Exit | End::Cancel => Duration::from_secs(60),
        };
        let spec = CommandSpec {
            command,
            shell: Some(PathBuf::from("/bin/bash")),
            cwd: dir.to_path_buf(),
            timeout,
            env_remove: Vec::new(),
            sandbox: None,
        };
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let cancelled_at = {
            let cancel = cancel.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                if end != End::Cancel {
                    return None;
                }
                while !ready.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                cancel.cancel();
                Some(Instant::now())
            })
        };
        let output = run(&spec, &cancel).await.unwrap();
        let returned = Instant::now();
        let returned_nanos = now_nanos();
        let left = with_marker(m);
        for pid in &left {
            signal(*pid, libc::SIGKILL);
        }
        let late = match end {
            End::Exit => {
                assert_eq!(output.ending, Ending::Exited, "{}", output.text);
                let ended: u128 = output.text.lines().next().unwrap().trim().parse().unwrap();
                Duration::from_nanos(u64::try_from(returned_nanos - ended).unwrap())
            }
            End::Timeout => {
                assert_eq!(output.ending, Ending::TimedOut, "{}", output.text);
                assert!(
                    ready.exists(),
                    "the escape was not in place before the timeout"
                );
                returned.duration_since(started + timeout)
            }
            End::Cancel => {
                assert_eq!(output.ending, Ending::Cancelled, "{}", output.text);
                returned.duration_since(cancelled_at.await.unwrap().unwrap())
            }
        };
        (late, left)
    }

    /// Runs every escape concurrently (so trees' orphans must be told apart) and checks each
    /// leaves nothing behind and returns at once.
    async fn every_escape(end: End) {
        let mut runs = Vec::new();
        for case in 0..escapes("", Path::new("")).len() {
            let dir = tempfile::tempdir().unwrap();
            let m = marker(&format!("case{case}"));
            let (name, launch, needs) = escapes(&m, dir.path()).swap_remove(case);
            if let Some(missing) = needs.iter().find(|tool| !on_path(tool)) {
                eprintln!("skipping '{name}': {missing} is not installed");
                continue;
            }
            runs.push(async move {
                let (late, left) = escape(&launch, &m, dir.path(), end).await;
                (name, late, left)
            });
        }
        let results = futures::future::join_all(runs).await;
        for (name, late, left) in &results {
            eprintln!("{end:?} '{name}': returned {late:?} after the end");
            assert_eq!(left, &Vec::<Pid>::new(), "{end:?} '{name}' left processes");
        }
        for (name, late, _) in &results {
            assert!(
                *late < RETURN_BOUND,
                "{end:?} '{name}' returned {late:?} late"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_an_exited_command_started_survives_it() {
        every_escape(End::Exit).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_a_timed_out_command_started_survives_it() {
        every_escape(End::Timeout).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_a_cancelled_command_started_survives_it() {
        every_escape(End::Cancel).await;
    }

    fn spec(command: &str) -> CommandSpec {
        CommandSpec {
            command: command.to_string(),
            shell: Some(PathBuf::from("/bin/bash")),
            cwd: std::env::temp_dir(),
            timeout: Duration::from_secs(60),
            env_remove: Vec::new(),
            sandbox: None,
        }
    }

    #[tokio::test]
    async fn spawning_makes_the_backend_a_subreaper() {
        run(&spec("true"), &CancellationToken::new()).await.unwrap();
        let mut flag: libc::c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer we pass.
        let got =
            unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) };
        assert_eq!((got, flag), (0, 1));
    }

    #[test]
    fn a_child_outlives_the_thread_that_asked_for_it() {
        // PR_SET_PDEATHSIG fires when the forking *thread* ends: a child forked on this
        // short-lived thread would die with it. The reaper thread forks instead.
        let m = marker("thread");
        let command = format!("exec -a {m} sleep 1000");
        let (child, tree) = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut command_line = Command::new("/bin/bash");
                command_line.arg("-c").arg(&command);
                let (child, tree) = spawn(command_line).await.unwrap();
                (child.id().unwrap(), tree)
            })
        })
        .join()
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let alive = with_marker(&m);
        drop(tree);
        let start = Instant::now();
        while !with_marker(&m).is_empty() && start.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(alive, vec![Pid::try_from(child).unwrap()]);
        assert_eq!(
            with_marker(&m),
            Vec::<Pid>::new(),
            "dropping the tree ends it"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn adopted_orphans_are_reaped_not_left_as_zombies() {
        let output = run(
            &spec("setsid -f bash -c 'echo $$; exec sleep 1000'; sleep 0.3"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        let pid: Pid = output.text.lines().next().unwrap().parse().unwrap();
        // Not even a zombie: the backend waited for it, by its pid.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} is still there: {:?}",
            Stat::read(pid)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ending_one_tree_leaves_another_running_tree_alone() {
        let (other, mine) = (marker("other"), marker("mine"));
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let cancel = CancellationToken::new();
        let long = spec(&format!(
            "setsid -f bash -c 'exec -a {} sleep 1000'; touch '{}'; sleep 1000",
            unspelled(&other),
            ready.display()
        ));
        let running = {
            let cancel = cancel.clone();
            tokio::spawn(async move { run(&long, &cancel).await.unwrap() })
        };
        // `setsid -f` returns before its child has exec'd the marked sleep: wait for both.
        let started = Instant::now();
        while !(ready.exists() && with_marker(&other).len() == 1)
            && started.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let short = format!("setsid -f bash -c 'exec -a {mine} sleep 1000'; sleep 0.3");
        run(&spec(&short), &CancellationToken::new()).await.unwrap();
        let (others, mine_left) = (with_marker(&other), with_marker(&mine));
        cancel.cancel();
        let output = running.await.unwrap();
        assert_eq!(output.ending, Ending::Cancelled);
        assert_eq!(mine_left, Vec::<Pid>::new());
        assert_eq!(others.len(), 1, "the running tree's process was killed");
        assert_eq!(with_marker(&other), Vec::<Pid>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_run_ends_what_it_detached() {
        let m = marker("dropped");
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let command = format!(
            "setsid -f bash -c 'exec -a {} sleep 1000'; touch '{}'; sleep 1000",
            unspelled(&m),
            ready.display()
        );
        let spec = spec(&command);
        let cancel = CancellationToken::new();
        // Boxed, so that dropping it drops the future itself.
        let mut running = Box::pin(run(&spec, &cancel));
        let started = Instant::now();
        // `setsid -f` returns before its child has exec'd the marked sleep: wait for both.
        while !(ready.exists() && with_marker(&m).len() == 1)
            && started.elapsed() < Duration::from_secs(20)
        {
            let _ = tokio::time::timeout(Duration::from_millis(10), &mut running).await;
        }
        assert_eq!(with_marker(&m).len(), 1);
        drop(running);
        let start = Instant::now();
        while !with_marker(&m).is_empty() && start.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(with_marker(&m), Vec::<Pid>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_background_job_that_clears_its_environment_is_still_in_the_tree() {
        // No marker, and orphaned before any scan sees it: its process group says whose it is.
        let m = marker("envgroup");
        // The shell ends as soon as the job runs as the marked sleep (same pid throughout).
        let command = format!(
            "env -i /bin/bash -c 'exec -a {m} sleep 1000' &\n\
             until grep -q {m} /proc/$!/cmdline; do :; done"
        );
        let output = run(&spec(&command), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(output.ending, Ending::Exited);
        let left = with_marker(&m);
        for pid in &left {
            signal(*pid, libc::SIGKILL);
        }
        assert_eq!(left, Vec::<Pid>::new());
    }

    #[test]
    fn an_unmarked_unseen_orphan_belongs_to_the_running_tree_whose_group_it_is_in() {
        // The rule alone: a pid that was never seen and has no readable environment (so no
        // marker) is owned by the running tree whose root leads its process group, and by no
        // tree when its group is nobody's.
        let mut reaper = Reaper::new();
        let root = Proc {
            pid: 4_000_000,
            start: 7,
        };
        reaper.trees.insert(9, root);
        let stranger = Proc {
            pid: 4_000_001,
            start: 8,
        };
        let in_group = |pgrp| Stat {
            state: b'S',
            ppid: reaper.me,
            pgrp,
            start: stranger.start,
        };
        assert_eq!(reaper.owner(stranger, in_group(root.pid)), Owner::Orphan(9));
        assert_eq!(reaper.owner(stranger, in_group(4_000_002)), Owner::Unknown);
        reaper.trees.clear();
        assert_eq!(reaper.owner(stranger, in_group(root.pid)), Owner::Unknown);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_orphan_of_a_tree_that_has_ended_is_killed_by_the_next_tick() {
        // A running tree keeps the reaper scanning.
        let mut keep = Command::new("/bin/bash");
        keep.args(["-c", "sleep 30"]);
        let (_keep_child, keep_tree) = spawn(keep).await.unwrap();
        // An orphan the backend adopts that names a tree of this backend that is not running
        // (its parent, not spawned through the reaper and carrying no tree, is left alone).
        let m = marker("ended");
        let status = std::process::Command::new("/bin/bash")
            .args([
                "-c",
                &format!(
                    "{TREE_VAR}={}:{} setsid -f bash -c 'echo $$; exec -a {m} sleep 1000 >/dev/null'",
                    std::process::id(),
                    u64::MAX - 1
                ),
            ])
            .stderr(std::process::Stdio::null())
            .output()
            .unwrap();
        let Ok(pid) = String::from_utf8_lossy(&status.stdout)
            .trim()
            .parse::<Pid>()
        else {
            // Killed before it could say its pid (the reaper's tick came first, as on a loaded
            // machine): nothing may be left that carries the marker.
            let start = Instant::now();
            while !with_marker(&m).is_empty() && start.elapsed() < Duration::from_secs(3) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let left = with_marker(&m);
            keep_tree.end().await;
            assert_eq!(left, Vec::<Pid>::new());
            return;
        };
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists()
            && start.elapsed() < Duration::from_secs(3)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = with_marker(&m);
        signal(pid, libc::SIGKILL);
        keep_tree.end().await;
        assert_eq!(left, Vec::<Pid>::new());
        // Gone, not a zombie: the reaper waited for it.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[tokio::test]
    async fn the_children_files_and_the_full_scan_agree() {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let cancel = CancellationToken::new();
        // `: >` is a builtin: no third child while the test looks.
        let command = format!("sleep 1000 & sleep 1000 & : > '{}'; wait", ready.display());
        let running = {
            let cancel = cancel.clone();
            tokio::spawn(async move { run(&spec(&command), &cancel).await })
        };
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let me = Pid::try_from(std::process::id()).unwrap();
        let sorted = |mut pids: Vec<Pid>| {
            pids.sort_unstable();
            pids
        };
        let direct = sorted(children(me, &None));
        let shell = direct
            .iter()
            .copied()
            .find(|pid| {
                sorted(children(*pid, &None)).len() == 2 && super::marker(*pid, me).is_some()
            })
            .expect("the shell with its two jobs");
        let map = Some(parent_map());
        assert_eq!(
            sorted(children(shell, &map)),
            sorted(children(shell, &None))
        );
        cancel.cancel();
        running.await.unwrap().unwrap();
    }

    /// Run by `end_all_ends_a_tree_whose_handle_never_ended_it` in a process of its own, since
    /// `end_all` ends every tree of the process (other tests' too).
    #[test]
    #[ignore = "a helper process for end_all_ends_a_tree_whose_handle_never_ended_it"]
    fn end_all_helper() {
        let Ok(m) = std::env::var("AGENT_NVIM_END_ALL_MARKER") else {
            return;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut command = Command::new("/bin/bash");
            command.args([
                "-c",
                &format!("setsid -f bash -c 'exec -a {m} sleep 1000' >/dev/null; sleep 1000"),
            ]);
            command.stdout(std::process::Stdio::null());
            let (child, tree) = spawn(command).await.unwrap();
            // As if the handle were lost in a runtime torn down at exit: no end is queued.
            std::mem::forget(tree);
            std::mem::forget(child);
            let start = Instant::now();
            while with_marker(&m).is_empty() && start.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        end_all();
    }

    #[test]
    fn end_all_ends_a_tree_whose_handle_never_ended_it() {
        let m = marker("endall");
        let helper = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "reaper::tests::end_all_helper", "--ignored"])
            .env("AGENT_NVIM_END_ALL_MARKER", &m)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(helper.success());
        // Without end_all, the detached sleep outlives the helper (its direct child alone dies,
        // by PDEATHSIG).
        let left = with_marker(&m);
        for pid in &left {
            signal(*pid, libc::SIGKILL);
        }
        assert_eq!(left, Vec::<Pid>::new());
    }

    /// What `signal` says as a user who may not signal init (pid 1, root's); exits non-zero when
    /// it is wrong. Run by `a_process_we_may_not_signal_is_told_apart_from_one_that_is_gone`.
    #[test]
    #[ignore = "a helper process for a_process_we_may_not_signal_is_told_apart_from_one_that_is_gone"]
    fn signal_helper() {
        if std::env::var_os("AGENT_NVIM_SIGNAL_HELPER").is_none() {
            return;
        }
        assert!(!signal(1, 0), "init answered as if we may signal it");
        // pid_max is at most 2^22: this pid never exists, and that is not a refusal.
        assert!(signal(1 << 23, 0));
    }

    #[test]
    fn a_process_we_may_not_signal_is_told_apart_from_one_that_is_gone() {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!signal(1, 0));
            assert!(signal(1 << 23, 0));
            return;
        }
        use std::os::unix::process::CommandExt;
        // Root may signal anything: ask as nobody instead.
        let helper = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "reaper::tests::signal_helper", "--ignored"])
            .env("AGENT_NVIM_SIGNAL_HELPER", "1")
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(helper.success());
    }
}
