//! What a simple command runs besides itself, for the rules: the one table of
//! programs and builtins that run other commands or evaluate their words as code, and how each
//! is read.
//!
//! Given the words of one simple command (unquoted, as the program gets them), [`runs`] says
//! which of these it is:
//! - [`Runs::Itself`]: nothing a rule must see beyond its own words (`ls -la`, `cargo test`);
//! - [`Runs::Commands`]: it runs other commands whose words the line shows (`timeout 5 rm x`
//!   runs `rm x`; `find . -exec rm {} +` runs `rm {}`; `xargs rm` runs `rm` with arguments it
//!   reads, so the rules see it as open-ended);
//! - [`Runs::Script`]: it runs a shell line given as one word (`bash -c 'rm x'`, `watch
//!   'rm x'`), which the caller splits again;
//! - [`Runs::Unseen`]: it runs code the line does not show, from a file (`make`, the hooks of
//!   `git commit`, a git alias, `bash script.sh`): an allow rule may still allow it (the person
//!   allowed exactly that), but a deny rule cannot see inside;
//! - [`Runs::Evaluates`]: its words are code a rule cannot read (`python -c`, `awk` with
//!   `system`, `sed` with `e`, `printf -v`, `declare -i`, `read "$v"`, `mapfile -C`, `git -c`,
//!   `eval`): never allowed by a rule, and never run unasked while deny rules exist.
//!
//! Nothing here reads files or the environment: it is the words alone. `shell.rs` walks the
//! line and calls this for every simple command, the inner ones too.

/// What a simple command runs besides itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs<'a> {
    /// Nothing a rule must see but its own words.
    Itself,
    /// These commands, each its words and whether it gets more arguments the line does not
    /// show (`xargs`, `parallel`-like): a rule sees each as a simple command of its own.
    Commands(Vec<Inner<'a>>),
    /// This shell line (bash's grammar), run as `bash -c` would.
    Script(std::borrow::Cow<'a, str>),
    /// Code from a file or a configuration the line does not show; why.
    Unseen(&'static str),
    /// Words that are code no rule can read; why.
    Evaluates(&'static str),
}

/// A command another one runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inner<'a> {
    /// Its words, the program first.
    pub words: &'a [String],
    /// Whether it gets arguments the line does not show (read from input or made up).
    pub open_ended: bool,
}

/// How a wrapper's options are read before its command, as its manual lists them. An option
/// it does not list makes the command unknown (asked about): taken for a flag, a value-taking
/// option we missed would have its value read as the command, and a deny rule would miss what
/// really runs.
struct Options {
    /// Options whose value is the next word when not joined (`-n 5`, `-n5`, `--signal=KILL`).
    takes: &'static [&'static str],
    /// Options that take no value (long ones may carry an optional `=value`).
    flags: &'static [&'static str],
    /// Short options whose optional value can only be joined (`nsenter -mFILE`): the rest of
    /// the word is theirs.
    joined: &'static [&'static str],
    /// Operands between the options and the command (timeout's duration, chroot's root).
    operands: usize,
    /// Whether the operands come before the options (`setarch ARCH -R COMMAND`).
    operands_first: bool,
    /// Whether `-NUMBER` is an option (`nice -5`).
    numeric: bool,
    /// Options after which it runs no command (`sudo -l`, `command -v`, `taskset -p`).
    no_command: &'static [&'static str],
    /// Options whose value is a shell line it runs (`su -c`, `flock -c`).
    script: &'static [&'static str],
    /// Options that make what it runs unknown (`env -S`, `sudo -s`).
    unknown: &'static [&'static str],
    /// Whether it starts a shell reading its input when given no command (`chroot DIR`).
    shell_without_command: bool,
    /// Whether `NAME=VALUE` words may come before its command (`env`, `sudo`): anywhere else
    /// such a word is an operand (`flock lk=1 ...`).
    assignments: bool,
}

/// The help and version options every GNU and util-linux tool takes.
const HELP: &[&str] = &["--help", "--version", "-h", "-V"];

impl Options {
    const fn new(takes: &'static [&'static str], flags: &'static [&'static str]) -> Self {
        Options {
            takes,
            flags,
            joined: &[],
            operands: 0,
            operands_first: false,
            numeric: false,
            no_command: &[],
            script: &[],
            unknown: &[],
            shell_without_command: false,
            assignments: false,
        }
    }
}

/// How one entry of [`TABLE`] is read.
enum Kind {
    /// Runs the command after its options (`timeout 5 rm x`).
    Wrapper(Options),
    /// `xargs` and the like: the command after its options, with arguments read from input.
    OpenEnded(Options),
    /// A shell: `-c SCRIPT` runs the script; a file runs what the file says; nothing reads a
    /// script from its input.
    Shell,
    /// Runs its arguments joined as a shell line (`watch`); `-x` runs them as a command.
    JoinedScript(Options),
    /// `su` and `runuser`: `-c LINE` runs the line (options may come after the user);
    /// `runuser -u USER COMMAND` runs the command; otherwise a shell.
    Su,
    /// Options that make it run a command of their own (`tar --to-command`, `rsync -e`,
    /// `scp -o ProxyCommand=`); without them it runs nothing else.
    CodeOptions(&'static [&'static str]),
    /// `find`: each `-exec`/`-execdir`/`-ok`/`-okdir` up to `;` or `+` is a command.
    Find,
    /// `git`: its global options and its subcommand decide.
    Git,
    /// `awk` and its kin: a program with `system()` or a pipe runs commands.
    Awk,
    /// `sed`: a script with `e` (or the `e` flag) runs commands, with `w` writes files.
    Sed,
    /// An interpreter: code given with these options (`-c`, `-e`) evaluates; a script file
    /// runs what the file says.
    Interpreter(&'static [&'static str]),
    /// Builtins that take variable names: a name that is not a plain identifier (or a digit
    /// subscript) evaluates code, and some options always do.
    Names(NameRules),
    /// Always evaluates its words (`eval`, `trap`, `let`, ...).
    Evaluates(&'static str),
    /// Always runs code from somewhere the line does not show (`make`).
    Unseen(&'static str),
}

/// How a builtin that takes variable names is read.
struct NameRules {
    /// Options that evaluate whatever follows (`declare -i`, `mapfile -C`, `printf -v`).
    evaluating: &'static [&'static str],
    /// Options whose value is a name (`read -a NAME`, `wait -p NAME`).
    name_values: &'static [&'static str],
    /// Options that take a value that is not a name (`read -p PROMPT`).
    takes: &'static [&'static str],
    /// Whether its operands are names (`read a b`, `declare a=1`); else only the options'.
    operands_are_names: bool,
    /// Operands before the names (`getopts OPTSTRING NAME`).
    skip: usize,
    /// Whether the evaluating options count anywhere among the words (`test -n x -a -v y`),
    /// not only before the first operand.
    anywhere: bool,
}

impl NameRules {
    const fn new(evaluating: &'static [&'static str], operands_are_names: bool) -> Self {
        NameRules {
            evaluating,
            name_values: &[],
            takes: &[],
            operands_are_names,
            skip: 0,
            anywhere: false,
        }
    }
}

/// setarch's options (and those of its links, `linux64`, ...).
const SETARCH_FLAGS: &[&str] = &[
    "-v",
    "--verbose",
    "-R",
    "--addr-no-randomize",
    "-F",
    "--fdpic-funcptrs",
    "-Z",
    "--mmap-page-zero",
    "-L",
    "--addr-compat-layout",
    "-X",
    "--read-implies-exec",
    "-B",
    "--32bit",
    "-I",
    "--short-inode",
    "-S",
    "--whole-seconds",
    "-T",
    "--sticky-timeouts",
    "-3",
    "--3gb",
    "--4gb",
    "--uname-2.6",
    "-h",
    "--help",
    "-V",
    "--version",
];

/// Every program and builtin that runs others or evaluates its words, by name. A program named
/// by a path is looked up by its base name (`/usr/bin/time`). Each entry has a test below.
const TABLE: &[(&[&str], Kind)] = &[
    (
        &["time"],
        Kind::Wrapper(Options::new(
            &["-f", "--format", "-o", "--output"],
            &[
                "-p",
                "--portability",
                "-a",
                "--append",
                "-v",
                "--verbose",
                "-q",
                "--quiet",
                "--help",
                "-V",
                "--version",
            ],
        )),
    ),
    (
        &["nice"],
        Kind::Wrapper(Options {
            numeric: true,
            ..Options::new(&["-n", "--adjustment"], HELP)
        }),
    ),
    (&["nohup"], Kind::Wrapper(Options::new(&[], HELP))),
    (
        &["setsid"],
        Kind::Wrapper(Options::new(
            &[],
            &[
                "-c",
                "--ctty",
                "-f",
                "--fork",
                "-w",
                "--wait",
                "-h",
                "--help",
                "-V",
                "--version",
            ],
        )),
    ),
    (
        &["stdbuf"],
        Kind::Wrapper(Options::new(
            &["-i", "-o", "-e", "--input", "--output", "--error"],
            HELP,
        )),
    ),
    (
        &["timeout"],
        Kind::Wrapper(Options {
            operands: 1,
            ..Options::new(
                &["-s", "--signal", "-k", "--kill-after"],
                &[
                    "-f",
                    "--foreground",
                    "-p",
                    "--preserve-status",
                    "-v",
                    "--verbose",
                    "--help",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["ionice"],
        Kind::Wrapper(Options {
            no_command: &["-p", "--pid", "-P", "--pgid", "-u", "--uid"],
            ..Options::new(
                &[
                    "-c",
                    "--class",
                    "-n",
                    "--classdata",
                    "-p",
                    "--pid",
                    "-P",
                    "--pgid",
                    "-u",
                    "--uid",
                ],
                &["-t", "--ignore", "-h", "--help", "-V", "--version"],
            )
        }),
    ),
    (
        &["taskset"],
        Kind::Wrapper(Options {
            operands: 1,
            no_command: &["-p", "--pid"],
            ..Options::new(
                &[],
                &[
                    "-a",
                    "--all-tasks",
                    "-c",
                    "--cpu-list",
                    "-p",
                    "--pid",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["chroot"],
        Kind::Wrapper(Options {
            operands: 1,
            shell_without_command: true,
            ..Options::new(
                &["--userspec", "--groups"],
                &["--skip-chdir", "--help", "--version"],
            )
        }),
    ),
    (
        &["setpriv"],
        Kind::Wrapper(Options::new(
            &[
                "--reuid",
                "--regid",
                "--ruid",
                "--rgid",
                "--euid",
                "--egid",
                "--groups",
                "--inh-caps",
                "--ambient-caps",
                "--bounding-set",
                "--securebits",
                "--pdeathsig",
                "--selinux-label",
                "--apparmor-profile",
                "--landlock-access",
                "--landlock-rule",
                "--ptracer",
            ],
            &[
                "-d",
                "--dump",
                "--nnp",
                "--no-new-privs",
                "--clear-groups",
                "--keep-groups",
                "--init-groups",
                "--reset-env",
                "--seccomp-filter",
                "-h",
                "--help",
                "-V",
                "--version",
            ],
        )),
    ),
    (
        &["prlimit"],
        Kind::Wrapper(Options {
            no_command: &["-p", "--pid"],
            // The resources' limits are joined to their option (`-n1024`, `--nofile=1024`).
            joined: &[
                "-c", "-d", "-e", "-f", "-i", "-l", "-m", "-n", "-q", "-r", "-s", "-t", "-u", "-v",
                "-x", "-y",
            ],
            ..Options::new(
                &["-p", "--pid", "-o", "--output"],
                &[
                    "--core",
                    "--data",
                    "--nice",
                    "--fsize",
                    "--sigpending",
                    "--memlock",
                    "--rss",
                    "--nofile",
                    "--msgqueue",
                    "--rtprio",
                    "--stack",
                    "--cpu",
                    "--nproc",
                    "--as",
                    "--locks",
                    "--rttime",
                    "--noheadings",
                    "--raw",
                    "--verbose",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["fakeroot"],
        Kind::Wrapper(Options {
            shell_without_command: true,
            ..Options::new(
                &["-l", "--lib", "--faked", "-s", "-i", "-b"],
                &["-u", "--unknown-is-real", "-h", "-v", "--version"],
            )
        }),
    ),
    (
        &["setarch"],
        Kind::Wrapper(Options {
            operands: 1,
            operands_first: true,
            shell_without_command: true,
            ..Options::new(&[], SETARCH_FLAGS)
        }),
    ),
    (
        &["linux32", "linux64", "i386", "x86_64", "uname26"],
        Kind::Wrapper(Options {
            shell_without_command: true,
            ..Options::new(&[], SETARCH_FLAGS)
        }),
    ),
    (
        &["unshare"],
        Kind::Wrapper(Options {
            shell_without_command: true,
            ..Options::new(
                &[
                    "-S",
                    "--setuid",
                    "-G",
                    "--setgid",
                    "-R",
                    "--root",
                    "-w",
                    "--wd",
                    "--propagation",
                    "--map-user",
                    "--map-group",
                    "--map-users",
                    "--map-groups",
                    "--setgroups",
                    "--monotonic",
                    "--boottime",
                ],
                &[
                    "-m",
                    "--mount",
                    "-u",
                    "--uts",
                    "-i",
                    "--ipc",
                    "-n",
                    "--net",
                    "-p",
                    "--pid",
                    "-U",
                    "--user",
                    "-C",
                    "--cgroup",
                    "-T",
                    "--time",
                    "-f",
                    "--fork",
                    "--kill-child",
                    "--mount-proc",
                    "--mount-binfmt",
                    "-r",
                    "--map-root-user",
                    "-c",
                    "--map-current-user",
                    "--map-auto",
                    "--keep-caps",
                    "-l",
                    "--load-interp",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["nsenter"],
        Kind::Wrapper(Options {
            shell_without_command: true,
            joined: &[
                "-m", "-u", "-i", "-n", "-p", "-C", "-U", "-T", "-r", "-w", "-W",
            ],
            ..Options::new(
                &["-t", "--target", "-S", "--setuid", "-G", "--setgid"],
                &[
                    "-a",
                    "--all",
                    "-F",
                    "--no-fork",
                    "-Z",
                    "--follow-context",
                    "-e",
                    "--env",
                    "--preserve-credentials",
                    "--keep-caps",
                    "--user-parent",
                    "--join-cgroup",
                    "--mount",
                    "--uts",
                    "--ipc",
                    "--net",
                    "--pid",
                    "--cgroup",
                    "--user",
                    "--time",
                    "--root",
                    "--wd",
                    "--wdns",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["flock"],
        Kind::Wrapper(Options {
            operands: 1,
            script: &["-c", "--command"],
            ..Options::new(
                &["-w", "--wait", "--timeout", "-E", "--conflict-exit-code"],
                &[
                    "-s",
                    "--shared",
                    "-x",
                    "-e",
                    "--exclusive",
                    "-n",
                    "--nb",
                    "--nonblock",
                    "-u",
                    "--unlock",
                    "-o",
                    "--close",
                    "-F",
                    "--no-fork",
                    "--verbose",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["env"],
        Kind::Wrapper(Options {
            unknown: &["-S", "--split-string", "-P"],
            assignments: true,
            ..Options::new(
                &["-u", "--unset", "-C", "--chdir"],
                &[
                    // `env -` is `env -i`.
                    "-",
                    "-i",
                    "--ignore-environment",
                    "-0",
                    "--null",
                    "-v",
                    "--debug",
                    "--block-signal",
                    "--default-signal",
                    "--ignore-signal",
                    "--list-signal-handling",
                    "--help",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["sudo"],
        Kind::Wrapper(Options {
            assignments: true,
            no_command: &[
                "-l",
                "--list",
                "-v",
                "--validate",
                "-K",
                "--remove-timestamp",
                "-e",
                "--edit",
                "-V",
                "--version",
                "-h",
                "--help",
            ],
            unknown: &["-s", "--shell", "-i", "--login"],
            ..Options::new(
                &[
                    "-u",
                    "--user",
                    "-g",
                    "--group",
                    "-h",
                    "--host",
                    "-p",
                    "--prompt",
                    "-C",
                    "--close-from",
                    "-D",
                    "--chdir",
                    "-r",
                    "--role",
                    "-t",
                    "--type",
                    "-T",
                    "--command-timeout",
                    "-U",
                    "--other-user",
                    "-R",
                    "--chroot",
                ],
                &[
                    "-A",
                    "--askpass",
                    "-b",
                    "--background",
                    "-E",
                    "--preserve-env",
                    "-H",
                    "--set-home",
                    "-k",
                    "--reset-timestamp",
                    "-n",
                    "--non-interactive",
                    "-P",
                    "--preserve-groups",
                    "-S",
                    "--stdin",
                    "-N",
                    "--no-update",
                    "-B",
                    "--bell",
                ],
            )
        }),
    ),
    (
        &["doas"],
        Kind::Wrapper(Options {
            unknown: &["-s"],
            no_command: &["-C", "-L"],
            ..Options::new(&["-u", "-C"], &["-n"])
        }),
    ),
    (
        &["command"],
        Kind::Wrapper(Options {
            no_command: &["-v", "-V"],
            ..Options::new(&[], &["-p"])
        }),
    ),
    (&["builtin"], Kind::Wrapper(Options::new(&[], &[]))),
    (
        &["strace", "ltrace"],
        Kind::Wrapper(Options {
            no_command: &["-p", "--attach"],
            ..Options::new(
                &[
                    "-e",
                    "-o",
                    "--output",
                    "-p",
                    "--attach",
                    "-s",
                    "--string-limit",
                    "-u",
                    "--user",
                    "-E",
                    "--env",
                    "-P",
                    "--trace-path",
                    "-a",
                    "--columns",
                    "-b",
                    "--detach-on",
                    "-I",
                    "--interruptible",
                    "-O",
                    "-S",
                    "--summary-sort-by",
                    "-X",
                    "--const-print-style",
                    "-U",
                    "--summary-columns",
                    "-n",
                    "--trace",
                    "--signal",
                    "--status",
                    "--inject",
                    "--fault",
                    "--quiet",
                    "--decode-fds",
                    "--syscall-limit",
                    "-l",
                    "-L",
                    "--library",
                ],
                &[
                    "-f",
                    "--follow-forks",
                    "-ff",
                    "--output-separately",
                    "-F",
                    "-c",
                    "--summary-only",
                    "-C",
                    "--summary",
                    "-d",
                    "--debug",
                    "-D",
                    "--daemonize",
                    "-DD",
                    "-DDD",
                    "-i",
                    "--instruction-pointer",
                    "-k",
                    "--stack-trace",
                    "-q",
                    "-qq",
                    "-qqq",
                    "-r",
                    "--relative-timestamps",
                    "-t",
                    "-tt",
                    "-ttt",
                    "--absolute-timestamps",
                    "-T",
                    "--syscall-times",
                    "-v",
                    "--no-abbrev",
                    "-w",
                    "--summary-wall-clock",
                    "-x",
                    "-xx",
                    "--strings-in-hex",
                    "-y",
                    "-yy",
                    "-z",
                    "--successful-only",
                    "-Z",
                    "--failed-only",
                    "--seccomp-bpf",
                    "--tips",
                    "--timestamps",
                    "--kill-on-exit",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (&["busybox"], Kind::Wrapper(Options::new(&[], &[]))),
    (
        &["xargs"],
        Kind::OpenEnded(Options {
            // Without a command xargs runs `echo`; `-e`, `-i` and `-l` take an optional
            // value, joined.
            joined: &["-e", "-i", "-l"],
            ..Options::new(
                &[
                    "-d",
                    "--delimiter",
                    "-E",
                    "-I",
                    "-L",
                    "-n",
                    "--max-args",
                    "-P",
                    "--max-procs",
                    "-s",
                    "--max-chars",
                    "-a",
                    "--arg-file",
                    "--process-slot-var",
                ],
                &[
                    "-0",
                    "--null",
                    "-r",
                    "--no-run-if-empty",
                    "-t",
                    "--verbose",
                    "-p",
                    "--interactive",
                    "-x",
                    "--exit",
                    "-o",
                    "--open-tty",
                    "--show-limits",
                    // These three take a value only joined (`--eof=E`).
                    "--eof",
                    "--replace",
                    "--max-lines",
                    "--help",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["chrt"],
        Kind::Wrapper(Options {
            operands: 1,
            no_command: &["-p", "--pid", "-m", "--max"],
            ..Options::new(
                &[
                    "-T",
                    "--sched-runtime",
                    "-P",
                    "--sched-period",
                    "-D",
                    "--sched-deadline",
                ],
                &[
                    "-a",
                    "--all-tasks",
                    "-b",
                    "--batch",
                    "-d",
                    "--deadline",
                    "-e",
                    "--ext",
                    "-f",
                    "--fifo",
                    "-i",
                    "--idle",
                    "-o",
                    "--other",
                    "-r",
                    "--rr",
                    "-R",
                    "--reset-on-fork",
                    "-v",
                    "--verbose",
                    "-h",
                    "--help",
                    "-V",
                    "--version",
                ],
            )
        }),
    ),
    (
        &["choom"],
        Kind::Wrapper(Options {
            no_command: &["-p", "--pid"],
            ..Options::new(&["-n", "--adjust"], HELP)
        }),
    ),
    (&["toybox"], Kind::Wrapper(Options::new(&[], &[]))),
    (
        &["fd", "fdfind"],
        Kind::CodeOptions(&["-x", "--exec", "-X", "--exec-batch"]),
    ),
    (&["rg"], Kind::CodeOptions(&["--pre"])),
    (&["bash", "sh", "dash", "rbash"], Kind::Shell),
    (
        &["watch"],
        Kind::JoinedScript(Options::new(
            &["-n", "--interval", "-q", "--equexit", "-s", "--shotsdir"],
            &[
                "-b",
                "--beep",
                "-c",
                "--color",
                "-C",
                "--no-color",
                "-d",
                "--differences",
                "-e",
                "--errexit",
                "-g",
                "--chgexit",
                "-t",
                "--no-title",
                "-w",
                "--no-wrap",
                "-x",
                "--exec",
                "-p",
                "--precise",
                "-r",
                "--no-rerun",
                "-h",
                "--help",
                "-v",
                "--version",
            ],
        )),
    ),
    (&["find"], Kind::Find),
    (&["git"], Kind::Git),
    (&["awk", "gawk", "mawk", "nawk", "busybox-awk"], Kind::Awk),
    (&["sed", "gsed"], Kind::Sed),
    (
        &[
            "python",
            "python2",
            "python3",
            "pypy",
            "pypy3",
            "perl",
            "ruby",
            "node",
            "nodejs",
            "deno",
            "bun",
            "php",
            "lua",
            "luajit",
            "tclsh",
            "wish",
            "Rscript",
            "osascript",
            "nvim",
            "vim",
            "ex",
            "emacs",
        ],
        Kind::Interpreter(&[
            "-c",
            "-e",
            "-E",
            "-r",
            "-p",
            "--eval",
            "--print",
            "--command",
            "--cmd",
            "eval",
            "-",
        ]),
    ),
    (&["printf"], Kind::Names(NameRules::new(&["-v"], false))),
    (
        &["declare", "typeset", "local", "export", "readonly"],
        // Integer and nameref attributes evaluate every later assignment to the name.
        Kind::Names(NameRules::new(&["-i", "-n", "+i", "+n"], true)),
    ),
    (
        &["read"],
        Kind::Names(NameRules {
            name_values: &["-a"],
            takes: &["-d", "-i", "-n", "-N", "-p", "-t", "-u"],
            ..NameRules::new(&[], true)
        }),
    ),
    (
        &["mapfile", "readarray"],
        Kind::Names(NameRules {
            takes: &["-c", "-d", "-n", "-O", "-s", "-u"],
            ..NameRules::new(&["-C"], true)
        }),
    ),
    (
        &["getopts"],
        Kind::Names(NameRules {
            skip: 1,
            ..NameRules::new(&[], true)
        }),
    ),
    (
        &["wait"],
        Kind::Names(NameRules {
            name_values: &["-p"],
            ..NameRules::new(&[], false)
        }),
    ),
    (&["unset"], Kind::Names(NameRules::new(&[], true))),
    (
        &["test", "["],
        // `-v NAME` and `-R NAME` evaluate a subscript in NAME, wherever they stand.
        Kind::Names(NameRules {
            anywhere: true,
            ..NameRules::new(&["-v", "-R"], false)
        }),
    ),
    (&["su", "runuser"], Kind::Su),
    (
        &["tar", "gtar", "bsdtar"],
        Kind::CodeOptions(&[
            "--to-command",
            "-I",
            "--use-compress-program",
            "--checkpoint-action",
            "-F",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
        ]),
    ),
    (
        &["rsync"],
        Kind::CodeOptions(&["-e", "--rsh", "--rsync-path"]),
    ),
    (
        &["scp", "sftp"],
        Kind::CodeOptions(&["-o", "-F", "-S", "-J"]),
    ),
    (
        &["pkexec"],
        Kind::Wrapper(Options::new(
            &["--user"],
            &[
                "--disable-internal-agent",
                "--keep-cwd",
                "--help",
                "--version",
            ],
        )),
    ),
    (
        &["run0"],
        Kind::Wrapper(Options::new(
            &[
                "-u",
                "--user",
                "-g",
                "--group",
                "--nice",
                "-D",
                "--chdir",
                "--setenv",
                "--unit",
                "--property",
                "--description",
                "--slice",
                "--slice-inherit",
                "--machine",
                "--background",
            ],
            &[
                "--no-ask-password",
                "-i",
                "--via-shell",
                "-h",
                "--help",
                "--version",
            ],
        )),
    ),
    (
        &["compgen", "complete"],
        Kind::Evaluates("it sets or runs completion functions and commands"),
    ),
    (&["eval"], Kind::Evaluates("it runs eval")),
    (
        &["source", "."],
        Kind::Evaluates("it runs a file with source"),
    ),
    (
        &["exec"],
        Kind::Evaluates("it replaces the shell with exec"),
    ),
    (&["let"], Kind::Evaluates("it holds arithmetic (let)")),
    (
        &["trap"],
        Kind::Evaluates("it sets a trap, which runs a command later"),
    ),
    (
        &[
            "alias",
            "hash",
            "enable",
            "shopt",
            "set",
            "coproc",
            "bind",
            "fc",
            "zsh",
            "ksh",
            "fish",
            "csh",
            "tcsh",
            "mksh",
            "yash",
            "expect",
            "script",
            "parallel",
            "ssh",
            "ansible",
            "tmux",
            "screen",
            "at",
            "batch",
            "crontab",
            "systemd-run",
        ],
        Kind::Evaluates(
            "it runs commands no rule can read (a shell of its own, a remote host, a later time)",
        ),
    ),
    (
        &["make", "gmake", "bmake", "just", "ninja", "rake"],
        Kind::Unseen("it runs what its build file says"),
    ),
    (
        &[
            "cargo", "npm", "npx", "yarn", "pnpm", "go", "gradle", "mvn", "pip", "pip3", "pytest",
            "tox", "nox", "cmake", "meson", "bazel", "dotnet", "uv", "uvx", "poetry", "pipenv",
            "composer", "xdg-open",
        ],
        Kind::Unseen("it runs the project's code or what it installs (build scripts, tests, package scripts)"),
    ),
    (
        &["sg", "capsh", "ed", "red", "m4", "dc", "gdb", "sqlite3", "vi", "view", "rvim", "gvim"],
        Kind::Evaluates("its words or its input are commands no rule can read (sg -c, m4 syscmd, ed !, gdb shell)"),
    ),
];

/// Git's global options that take the next word as their value.
const GIT_TAKES: &[&str] = &[
    "-C",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
];

/// Variables whose value changes which program a later command runs, or makes a shell or an
/// interpreter run code when it starts: assigned anywhere in a line, they make it opaque.
const RISKY_VARS: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "IFS",
    "PS4",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "BASHOPTS",
    "GLOBIGNORE",
    "CDPATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5OPT",
    "PERL5LIB",
    "NODE_OPTIONS",
    "RUBYOPT",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "SHELL",
];

/// Prefixes of the same kind: the dynamic loader's (`LD_PRELOAD`), bash's exported functions
/// (`BASH_FUNC_ls%%`), git's (`GIT_SSH_COMMAND`, `GIT_CONFIG_*`, `GIT_EXEC_PATH`).
const RISKY_PREFIXES: &[&str] = &["LD_", "BASH_FUNC_", "GIT_"];

/// Whether assigning `name` changes what later commands run.
pub fn risky_name(name: &str) -> bool {
    RISKY_VARS.contains(&name) || RISKY_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `name` is a plain variable name, or one with a subscript of digits (`a[3]`): any
/// other subscript is evaluated as arithmetic, which can run code.
pub fn plain_name(name: &str) -> bool {
    let (base, subscript) = match name.split_once('[') {
        Some((base, rest)) => match rest.strip_suffix(']') {
            Some(sub) => (base, Some(sub)),
            None => return false,
        },
        None => (name, None),
    };
    let identifier = !base.is_empty()
        && !base.starts_with(|c: char| c.is_ascii_digit())
        && base.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier && subscript.is_none_or(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
}

/// Why an assignment `NAME=VALUE` (or a bare `NAME` a builtin assigns) makes a line opaque, or
/// None when it does not.
pub fn assignment(word: &str) -> Option<&'static str> {
    const COMPUTED: &str = "it assigns to a computed name or subscript, which evaluates code";
    let (name, value) = word.split_once('=').unwrap_or((word, ""));
    let name = name.strip_suffix('+').unwrap_or(name);
    if !plain_name(name) {
        return Some(COMPUTED);
    }
    // `a=([i]=x)`: each subscript of a compound value is evaluated too.
    if let Some(list) = value.strip_prefix('(') {
        let mut rest = list;
        while let Some(open) = rest.find('[') {
            let after = &rest[open + 1..];
            let Some(close) = after.find(']') else {
                return Some(COMPUTED);
            };
            let subscript = &after[..close];
            if subscript.is_empty() || !subscript.chars().all(|c| c.is_ascii_digit()) {
                return Some(COMPUTED);
            }
            rest = &after[close + 1..];
        }
    }
    let base = name.split('[').next().unwrap_or(name);
    risky_name(base)
        .then_some("it sets a variable that changes what commands run (PATH, LD_*, IFS, ...)")
}

/// The base name of a program named by a path (`/usr/bin/time` is `time`).
fn base(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// What `words` (one simple command, the program first) runs besides itself.
pub fn runs(words: &[String]) -> Runs<'_> {
    let Some(program) = words.first() else {
        return Runs::Itself;
    };
    let name = base(program);
    let Some(kind) = kind_of(name) else {
        if loader(name) {
            return Runs::Evaluates("it runs a program through the dynamic loader");
        }
        if program.contains('/') {
            return Runs::Unseen("it runs a program named by its path, whose code no rule sees");
        }
        return Runs::Itself;
    };
    let args = &words[1..];
    match kind {
        Kind::Wrapper(options) => wrapper(args, options, false),
        Kind::OpenEnded(options) => match wrapper(args, options, true) {
            // `xargs` alone runs `echo`.
            Runs::Itself => Runs::Itself,
            other => other,
        },
        Kind::Shell => shell(args),
        Kind::JoinedScript(options) => watch(args, options),
        Kind::Su => su(name, args),
        Kind::CodeOptions(options) => code_options(name, args, options),
        Kind::Find => find(args),
        Kind::Git => git(args),
        Kind::Awk => awk(args),
        Kind::Sed => sed(args),
        Kind::Interpreter(code) => interpreter(args, code),
        Kind::Names(rules) => names(args, rules),
        Kind::Evaluates(why) => Runs::Evaluates(why),
        Kind::Unseen(why) => Runs::Unseen(why),
    }
}

/// The table's entry for the program `name`: by its name, or, for an interpreter, by its name
/// without a version (`python3.12`, `perl5.36.0`, `node18`).
fn kind_of(name: &str) -> Option<&'static Kind> {
    if let Some((_, kind)) = TABLE.iter().find(|(names, _)| names.contains(&name)) {
        return Some(kind);
    }
    let unversioned = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if unversioned == name || unversioned.is_empty() {
        return None;
    }
    TABLE
        .iter()
        .find(|(names, kind)| matches!(kind, Kind::Interpreter(_)) && names.contains(&unversioned))
        .map(|(_, kind)| kind)
}

/// Whether `name` is the dynamic loader, which runs the program it is given
/// (`/lib64/ld-linux-x86-64.so.2 /bin/rm x`).
fn loader(name: &str) -> bool {
    name == "ld.so" || (name.starts_with("ld-") && name.contains(".so"))
}

/// Whether the program `name` reads its words as options, commands or code (it has an entry
/// in the table, or runs a program it is given): such a program is judged by its words, so a
/// word the shell makes (`$x`, `{a,b}`, a pattern) is one no rule saw. One that runs unseen
/// code whatever its words (`cargo`, `make`) is judged the same with any words.
pub fn reads_its_words(program: &str) -> bool {
    let name = base(program);
    match kind_of(name) {
        Some(Kind::Unseen(_)) => false,
        Some(_) => true,
        None => loader(name),
    }
}

/// Whether `arg` is the option `option`, alone or with its value joined (`-n5`, `--user=x`).
fn is_option(arg: &str, option: &str) -> bool {
    arg == option
        || (option.starts_with("--")
            && arg.strip_prefix(option).is_some_and(|r| r.starts_with('=')))
        || (!option.starts_with("--")
            && option.len() == 2
            && arg.starts_with(option)
            && arg.len() > 2)
}

/// Why an option a wrapper does not list makes its command unknown.
const UNLISTED: &str = "it runs a command after an option no rule knows the meaning of";

/// One step of a wrapper's options.
enum Step<'a> {
    /// Past this many words; still in the options.
    Next(usize),
    /// The options end here; the command follows.
    End,
    /// What it runs is decided by an option.
    Decided(Runs<'a>),
}

/// Reads the option at `args[i]` (which starts with `-`).
fn option<'a>(args: &'a [String], i: usize, options: &Options) -> Step<'a> {
    let arg = args[i].as_str();
    let value_after = |option: &str| -> Option<&'a str> {
        // The value is the next word, or joined (`-c'line'`, `--command=line`).
        let own = &args[i];
        if own == option {
            args.get(i + 1).map(String::as_str)
        } else if option.starts_with("--") {
            own.split_once('=').map(|(_, v)| v)
        } else {
            own.get(option.len()..)
        }
    };
    if arg == "--" {
        return Step::End;
    }
    if options.numeric && arg[1..].chars().all(|c| c.is_ascii_digit()) {
        return Step::Next(1);
    }
    if arg.starts_with("--") {
        let name = arg.split_once('=').map_or(arg, |(name, _)| name);
        if options.unknown.contains(&name) {
            return Step::Decided(Runs::Evaluates(
                "it runs a shell or a line no rule can read",
            ));
        }
        if options.script.contains(&name) {
            return Step::Decided(match value_after(name) {
                Some(script) => Runs::Script(script.into()),
                None => Runs::Evaluates("its script option has no script"),
            });
        }
        if options.no_command.contains(&name) {
            return Step::Decided(Runs::Itself);
        }
        if options.takes.contains(&name) {
            return Step::Next(if arg.contains('=') { 1 } else { 2 });
        }
        if options.flags.contains(&name) {
            return Step::Next(1);
        }
        return Step::Decided(Runs::Evaluates(UNLISTED));
    }
    // A cluster of short options (`-fw`), the last of which may take a value (`-ow5`, `-w 5`).
    for (at, letter) in arg.char_indices().skip(1) {
        let short = format!("-{letter}");
        let short = short.as_str();
        let rest = &arg[at + letter.len_utf8()..];
        if options.unknown.contains(&short) {
            return Step::Decided(Runs::Evaluates(
                "it runs a shell or a line no rule can read",
            ));
        }
        if options.script.contains(&short) {
            let script = if rest.is_empty() {
                args.get(i + 1).map(String::as_str)
            } else {
                Some(rest)
            };
            return Step::Decided(match script {
                Some(script) => Runs::Script(script.into()),
                None => Runs::Evaluates("its script option has no script"),
            });
        }
        if options.no_command.contains(&short) {
            return Step::Decided(Runs::Itself);
        }
        if options.takes.contains(&short) {
            return Step::Next(if rest.is_empty() { 2 } else { 1 });
        }
        if options.joined.contains(&short) {
            return Step::Next(1);
        }
        if !options.flags.contains(&short) && !options.flags.contains(&arg) {
            return Step::Decided(Runs::Evaluates(UNLISTED));
        }
        if options.flags.contains(&arg) {
            // A flag of several letters as the manual writes it (`-ff`, `-DD`).
            return Step::Next(1);
        }
    }
    Step::Next(1)
}

/// Reads a wrapper's options and operands; the rest is the command it runs.
fn wrapper<'a>(args: &'a [String], options: &Options, open_ended: bool) -> Runs<'a> {
    let mut i = if options.operands_first {
        options.operands
    } else {
        0
    };
    while let Some(arg) = args.get(i) {
        if !arg.starts_with('-') || (arg == "-" && !options.flags.contains(&"-")) {
            break;
        }
        if arg == "-" {
            i += 1;
            continue;
        }
        match option(args, i, options) {
            Step::Next(n) => i += n,
            Step::End => {
                i += 1;
                break;
            }
            Step::Decided(runs) => return runs,
        }
    }
    // `env NAME=VALUE COMMAND`: the assignments are the command's environment.
    while options.assignments
        && args
            .get(i)
            .is_some_and(|a| a.contains('=') && !a.starts_with('='))
    {
        if let Some(why) = assignment(&args[i]) {
            return Runs::Evaluates(why);
        }
        i += 1;
    }
    if !options.operands_first {
        i += options.operands;
    }
    // `flock FILE -c LINE`: the script option after the operands.
    if let Some(option) = args
        .get(i)
        .and_then(|a| options.script.iter().find(|o| a == *o))
    {
        return match args.get(i + 1) {
            Some(script) if *option == args[i] => Runs::Script(script.as_str().into()),
            _ => Runs::Evaluates("its script option has no script"),
        };
    }
    match args.get(i..) {
        // A program that is an option is one we read wrong: not known.
        Some([first, ..]) if first.starts_with('-') => Runs::Evaluates(UNLISTED),
        Some(rest) if !rest.is_empty() => Runs::Commands(vec![Inner {
            words: rest,
            open_ended,
        }]),
        _ if options.shell_without_command => {
            Runs::Evaluates("it starts a shell that reads commands no rule can see")
        }
        _ => Runs::Itself,
    }
}

/// A program that runs a command only with some options: any of them found, in a cluster of
/// short options (`rsync -ae`, `tar -xI`), as a long option or an abbreviation of one
/// (`--checkpoint-act=`), or in tar's first word without a dash (`tar xIf`), evaluates.
fn code_options<'a>(name: &str, args: &'a [String], options: &[&str]) -> Runs<'a> {
    const WHY: &str =
        "an option of it runs a command of its own (rsync -e, tar --to-command, scp -o, fd -x)";
    for (i, arg) in args.iter().enumerate() {
        if arg == "--" {
            break;
        }
        let cluster = match arg.strip_prefix("--") {
            Some(long) => {
                let long = long.split_once('=').map_or(long, |(n, _)| n);
                let abbreviates = |o: &&str| {
                    o.strip_prefix("--")
                        .is_some_and(|full| !long.is_empty() && full.starts_with(long))
                };
                if options.iter().any(abbreviates) {
                    return Runs::Evaluates(WHY);
                }
                continue;
            }
            None => match arg.strip_prefix('-') {
                Some(letters) => letters,
                None if i == 0 && name.ends_with("tar") => arg.as_str(),
                None => continue,
            },
        };
        let short = |c: char| {
            options
                .iter()
                .any(|o| o.len() == 2 && o.starts_with('-') && o.ends_with(c))
        };
        if cluster.chars().any(short) {
            return Runs::Evaluates(WHY);
        }
    }
    Runs::Itself
}

/// The shell options a `bash -c` line may carry and still be read as bash reads it.
const SHELL_FLAGS: &str = "ceuxvfnC";

/// `bash -c SCRIPT`, `bash FILE`, or a shell reading its input.
fn shell(args: &[String]) -> Runs<'_> {
    let mut command = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" || arg == "-" {
            i += 1;
            break;
        }
        if arg == "-o" || arg == "+o" {
            // `-o pipefail`: options that change how commands fail, not how they parse.
            match args.get(i + 1).map(String::as_str) {
                Some(
                    "pipefail" | "errexit" | "nounset" | "xtrace" | "verbose" | "noglob"
                    | "noclobber",
                ) => {
                    i += 2;
                    continue;
                }
                _ => {
                    return Runs::Evaluates(
                        "it starts a shell with options that change how it reads",
                    )
                }
            }
        }
        if arg == "--norc" || arg == "--noprofile" {
            i += 1;
            continue;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            break;
        };
        if flags.is_empty() || !flags.chars().all(|c| SHELL_FLAGS.contains(c)) {
            return Runs::Evaluates("it starts a shell with options that change how it reads");
        }
        command |= flags.contains('c');
        i += 1;
    }
    match args.get(i) {
        Some(script) if command => Runs::Script(script.as_str().into()),
        Some(_) => Runs::Unseen("it runs a script file"),
        None => Runs::Evaluates("it starts a shell that reads commands from its input"),
    }
}

/// `watch [options] COMMAND...`: the words joined with spaces, run by `sh -c` (`-x`: run
/// as a command).
fn watch<'a>(args: &'a [String], options: &Options) -> Runs<'a> {
    let exec = args
        .iter()
        .take_while(|a| a.starts_with('-'))
        .any(|a| a == "-x" || a == "--exec");
    match wrapper(args, options, false) {
        Runs::Commands(inner) if exec => Runs::Commands(inner),
        Runs::Commands(inner) => match inner.first() {
            Some(first) => Runs::Script(first.words.join(" ").into()),
            None => Runs::Itself,
        },
        other => other,
    }
}

/// `su [options] [-] [USER [ARGS]]` and `runuser`: `-c LINE` anywhere runs the line;
/// `runuser -u USER [--] COMMAND` runs the command; anything else starts a shell.
fn su<'a>(name: &str, args: &'a [String]) -> Runs<'a> {
    for (i, arg) in args.iter().enumerate() {
        for option in ["-c", "--command", "--session-command"] {
            if arg == option {
                return match args.get(i + 1) {
                    Some(line) => Runs::Script(line.as_str().into()),
                    None => Runs::Evaluates("its script option has no script"),
                };
            }
            if let Some(line) = arg.strip_prefix(option).and_then(|r| r.strip_prefix('=')) {
                return Runs::Script(line.into());
            }
        }
    }
    if name == "runuser" && args.iter().any(|a| a == "-u" || a == "--user") {
        return wrapper(
            args,
            &Options::new(
                &[
                    "-u",
                    "--user",
                    "-g",
                    "--group",
                    "-G",
                    "--supp-group",
                    "-w",
                    "--whitelist-environment",
                ],
                &["-m", "-p", "--preserve-environment", "-P", "--pty"],
            ),
            false,
        );
    }
    Runs::Evaluates("it starts a shell that reads commands no rule can see")
}

/// `find ... -exec COMMAND {} ;` and its kin: each is a command; `-delete` and the file
/// writers as before.
fn find(args: &[String]) -> Runs<'_> {
    let mut inner = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = i + 1;
                // `;` ends it; `+` only right after `{}` (elsewhere it is a word).
                let end = (start..args.len())
                    .find(|&j| {
                        args[j] == ";" || (args[j] == "+" && j > start && args[j - 1] == "{}")
                    })
                    .unwrap_or(args.len());
                if start >= end {
                    return Runs::Evaluates("its -exec has no command");
                }
                inner.push(Inner {
                    words: &args[start..end],
                    open_ended: false,
                });
                i = end + 1;
            }
            "-delete" => return Runs::Evaluates("it deletes files (find -delete)"),
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                return Runs::Evaluates("it writes files (find -fprint)")
            }
            _ => i += 1,
        }
    }
    if inner.is_empty() {
        Runs::Itself
    } else {
        Runs::Commands(inner)
    }
}

/// `git`: `-c` and `--config-env` name programs in the line itself (evaluates). Every
/// subcommand reads the repository's configuration, which the model (or a command it ran) can
/// write, and which names programs git runs (an external diff, a textconv, an fsmonitor, a
/// pager, hooks on every command that writes the index or a ref, aliases): code the line does
/// not show. Only its version and help run nothing.
fn git(args: &[String]) -> Runs<'_> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "-c" || arg.starts_with("--config-env") || arg.starts_with("--exec-path=") {
            return Runs::Evaluates(
                "it sets git configuration, which can name programs to run (git -c)",
            );
        }
        if !arg.starts_with('-') {
            break;
        }
        i += if GIT_TAKES.contains(&arg.as_str()) {
            2
        } else {
            1
        };
    }
    let rest: Vec<&str> = args.iter().skip(i).map(String::as_str).collect();
    let own: Vec<&str> = args.iter().take(i).map(String::as_str).collect();
    if own == ["--version"] || own == ["--help"] {
        return Runs::Itself;
    }
    match rest[..] {
        [] | ["--version"] | ["version"] | ["help"] | ["--help"] | ["-h"] => Runs::Itself,
        _ => Runs::Unseen(
            "git runs programs its configuration names (hooks, aliases, diff drivers, fsmonitor)",
        ),
    }
}

/// How a program's own options are read (sed's, awk's): short letters that are flags, take a
/// value (joined or the next word), take a script (collected), take a script file (not
/// shown), or take an optional value that can only be joined; long options the same, matched
/// by any unambiguous prefix as getopt does. Anything else is an option no rule knows.
struct Grammar {
    flags: &'static str,
    values: &'static str,
    scripts: &'static str,
    files: &'static str,
    optional: &'static str,
    long: &'static [(&'static str, Takes)],
}

/// What a long option takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    Nothing,
    Value,
    Script,
    File,
    /// A value only joined (`--in-place=.bak`).
    Optional,
}

/// Reads `args`' options by `grammar`: the scripts given with options, and where the operands
/// start; or what the program runs when an option decides it.
fn read_options<'a>(
    args: &'a [String],
    grammar: &Grammar,
    file_why: &'static str,
) -> Result<(Vec<&'a str>, usize), Runs<'a>> {
    let mut scripts = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if arg == "--" {
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            i -= 1;
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, joined) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let exact = grammar.long.iter().find(|(full, _)| *full == name);
            let mut prefixed = grammar
                .long
                .iter()
                .filter(|(full, _)| full.starts_with(name));
            let found = exact.or_else(|| match (prefixed.next(), prefixed.next()) {
                (Some(one), None) if !name.is_empty() => Some(one),
                _ => None,
            });
            let Some((_, takes)) = found else {
                return Err(Runs::Evaluates(UNLISTED));
            };
            let value = || joined.or_else(|| args.get(i).map(String::as_str));
            match takes {
                Takes::Nothing | Takes::Optional => {}
                Takes::File => return Err(Runs::Unseen(file_why)),
                Takes::Value => i += usize::from(joined.is_none()),
                Takes::Script => {
                    scripts.extend(value());
                    i += usize::from(joined.is_none());
                }
            }
            continue;
        }
        for (at, letter) in arg.char_indices().skip(1) {
            let rest = &arg[at + letter.len_utf8()..];
            let value = || {
                (!rest.is_empty())
                    .then_some(rest)
                    .or_else(|| args.get(i).map(String::as_str))
            };
            if grammar.files.contains(letter) {
                return Err(Runs::Unseen(file_why));
            }
            if grammar.scripts.contains(letter) {
                scripts.extend(value());
                i += usize::from(rest.is_empty());
                break;
            }
            if grammar.values.contains(letter) {
                i += usize::from(rest.is_empty());
                break;
            }
            if grammar.optional.contains(letter) {
                break;
            }
            if !grammar.flags.contains(letter) {
                return Err(Runs::Evaluates(UNLISTED));
            }
        }
    }
    Ok((scripts, i))
}

/// awk's options, gawk's (a superset of mawk's, nawk's and busybox's).
const AWK: Grammar = Grammar {
    flags: "bcCgIhMnNOPrsStVk",
    values: "Fv",
    scripts: "e",
    files: "fEil",
    optional: "dDLop",
    long: &[
        ("file", Takes::File),
        ("field-separator", Takes::Value),
        ("assign", Takes::Value),
        ("characters-as-bytes", Takes::Nothing),
        ("traditional", Takes::Nothing),
        ("copyright", Takes::Nothing),
        ("dump-variables", Takes::Optional),
        ("debug", Takes::Optional),
        ("source", Takes::Script),
        ("exec", Takes::File),
        ("gen-pot", Takes::Nothing),
        ("help", Takes::Nothing),
        ("include", Takes::File),
        ("trace", Takes::Nothing),
        ("load", Takes::File),
        ("lint", Takes::Optional),
        ("bignum", Takes::Nothing),
        ("use-lc-numeric", Takes::Nothing),
        ("non-decimal-data", Takes::Nothing),
        ("pretty-print", Takes::Optional),
        ("optimize", Takes::Nothing),
        ("profile", Takes::Optional),
        ("posix", Takes::Nothing),
        ("re-interval", Takes::Nothing),
        ("no-optimize", Takes::Nothing),
        ("sandbox", Takes::Nothing),
        ("lint-old", Takes::Nothing),
        ("version", Takes::Nothing),
    ],
};

/// `awk PROGRAM` (or `-e`/`--source PROGRAM`): `system(`, a pipe, `ENVIRON` or gawk's `@`
/// (`@include`, `@load`, an indirect call) runs or reaches what no rule sees; `-f FILE`,
/// `-i`, `-l` run a program the line does not show.
fn awk(args: &[String]) -> Runs<'_> {
    let (mut programs, operands) =
        match read_options(args, &AWK, "it runs an awk program from a file") {
            Ok(read) => read,
            Err(runs) => return runs,
        };
    if programs.is_empty() {
        programs.extend(args.get(operands).map(String::as_str));
    }
    if programs.iter().any(|p| {
        p.contains("system") || p.contains('|') || p.contains("ENVIRON") || p.contains('@')
    }) {
        return Runs::Evaluates("its awk program runs commands (system, a pipe, @include)");
    }
    Runs::Itself
}

/// sed's options, GNU sed's.
const SED: Grammar = Grammar {
    flags: "nErsuz",
    values: "l",
    scripts: "e",
    files: "f",
    optional: "i",
    long: &[
        ("quiet", Takes::Nothing),
        ("silent", Takes::Nothing),
        ("debug", Takes::Nothing),
        ("expression", Takes::Script),
        ("file", Takes::File),
        ("follow-symlinks", Takes::Nothing),
        ("in-place", Takes::Optional),
        ("line-length", Takes::Value),
        ("null-data", Takes::Nothing),
        ("zero-terminated", Takes::Nothing),
        ("posix", Takes::Nothing),
        ("regexp-extended", Takes::Nothing),
        ("sandbox", Takes::Nothing),
        ("separate", Takes::Nothing),
        ("unbuffered", Takes::Nothing),
        ("help", Takes::Nothing),
        ("version", Takes::Nothing),
    ],
};

/// `sed SCRIPT` or `-e SCRIPT`...: a script that runs commands (`e`, the `e` flag) or writes
/// files (`w`, the `w` flag), or that cannot be read, evaluates; `-f FILE` is not shown.
fn sed(args: &[String]) -> Runs<'_> {
    let (mut scripts, operands) = match read_options(args, &SED, "it runs a sed script from a file")
    {
        Ok(read) => read,
        Err(runs) => return runs,
    };
    if scripts.is_empty() {
        scripts.extend(args.get(operands).map(String::as_str));
    }
    for script in scripts {
        if let Err(why) = sed_script(script) {
            return Runs::Evaluates(why);
        }
    }
    Runs::Itself
}

/// Reads a sed script far enough to find every command that runs or writes; what it cannot
/// read is an error too.
fn sed_script(script: &str) -> Result<(), &'static str> {
    const UNREAD: &str = "its sed script cannot be read";
    const RUNS: &str = "its sed script runs commands or writes files (e, w)";
    let s: Vec<char> = script.chars().collect();
    let mut i = 0;
    // Skips to the end of the line (text and file names run to it).
    let to_line_end = |i: &mut usize| {
        while *i < s.len() && s[*i] != '\n' {
            if s[*i] == '\\' {
                *i += 1;
            }
            *i += 1;
        }
    };
    // Skips a delimited part (a regex or a replacement) ending at `delim`.
    let delimited = |i: &mut usize, delim: char| -> Result<(), &'static str> {
        while *i < s.len() && s[*i] != delim {
            if s[*i] == '\\' {
                *i += 1;
            }
            *i += 1;
        }
        if *i >= s.len() {
            return Err(UNREAD);
        }
        *i += 1;
        Ok(())
    };
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() || c == ';' || c == '}' {
            i += 1;
            continue;
        }
        if c == '#' {
            to_line_end(&mut i);
            continue;
        }
        // Up to two addresses, then `!`.
        for n in 0..2 {
            if n == 1 {
                if i < s.len() && s[i] == ',' {
                    i += 1;
                } else {
                    break;
                }
            }
            while i < s.len() && s[i].is_whitespace() && s[i] != '\n' {
                i += 1;
            }
            match s.get(i) {
                Some('/') => {
                    i += 1;
                    delimited(&mut i, '/')?;
                    while i < s.len() && matches!(s[i], 'I' | 'M') {
                        i += 1;
                    }
                }
                Some('\\') => {
                    let delim = *s.get(i + 1).ok_or(UNREAD)?;
                    i += 2;
                    delimited(&mut i, delim)?;
                    while i < s.len() && matches!(s[i], 'I' | 'M') {
                        i += 1;
                    }
                }
                Some(d) if d.is_ascii_digit() || *d == '$' || *d == '+' || *d == '~' => {
                    i += 1;
                    while i < s.len() && (s[i].is_ascii_digit() || s[i] == '~') {
                        i += 1;
                    }
                }
                _ => {}
            }
        }
        while i < s.len() && (s[i].is_whitespace() || s[i] == '!') && s[i] != '\n' {
            i += 1;
        }
        let Some(&command) = s.get(i) else {
            return Err(UNREAD);
        };
        i += 1;
        match command {
            '{' => {}
            'e' | 'w' | 'W' => return Err(RUNS),
            'a' | 'i' | 'c' | 'r' | 'R' => {
                // Text or a file name, to the end of the line.
                to_line_end(&mut i);
            }
            ':' | 'b' | 't' | 'T' | 'v' => {
                // A label (or a version) ends at `;` or the line's end in GNU sed; what
                // follows is read as commands (ending it sooner only reads more of them).
                while i < s.len() && s[i] != '\n' && s[i] != ';' {
                    i += 1;
                }
            }
            '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z'
            | 'F' | 'q' | 'Q' | 'L' => {
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
            }
            's' | 'y' => {
                let delim = *s.get(i).ok_or(UNREAD)?;
                if delim == '\n' || delim == '\\' {
                    return Err(UNREAD);
                }
                i += 1;
                delimited(&mut i, delim)?;
                delimited(&mut i, delim)?;
                if command == 's' {
                    while i < s.len() && !matches!(s[i], ';' | '\n' | '}') {
                        match s[i] {
                            'e' | 'w' | 'W' => return Err(RUNS),
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t' => {}
                            d if d.is_ascii_digit() => {}
                            _ => return Err(UNREAD),
                        }
                        i += 1;
                    }
                }
            }
            _ => return Err(UNREAD),
        }
    }
    Ok(())
}

/// An interpreter: inline code (`-c`, `-e`, ...) evaluates; otherwise it runs a file or a
/// module the line does not show. Its version or help runs nothing.
fn interpreter<'a>(args: &'a [String], code: &[&str]) -> Runs<'a> {
    match args.first().map(String::as_str) {
        None => Runs::Evaluates("it starts an interpreter that reads code from its input"),
        Some("--version" | "-V" | "--help" | "-h" | "-v") if args.len() == 1 => Runs::Itself,
        Some(_) => {
            if args.iter().any(|a| code.iter().any(|c| is_option(a, c)))
                // An editor's `+COMMAND`.
                || args.iter().any(|a| a.len() > 1 && a.starts_with('+'))
            {
                Runs::Evaluates("its words are code for an interpreter (-c, -e)")
            } else {
                Runs::Unseen("it runs a script or module the line does not show")
            }
        }
    }
}

/// A builtin that takes variable names: evaluating options, names that are not plain, and
/// risky names each make it evaluate.
fn names<'a>(args: &'a [String], rules: &NameRules) -> Runs<'a> {
    const EVALUATES: &str =
        "it evaluates its words as code (printf -v, declare -i/-n, mapfile -C, test -v)";
    // The letters of an option cluster, each as an option of its own (`-ri`: `-r`, `-i`).
    let letters = |arg: &str| -> Vec<String> {
        let sign = &arg[..1];
        arg[1..].chars().map(|c| format!("{sign}{c}")).collect()
    };
    if rules.anywhere && args.iter().any(|a| rules.evaluating.contains(&a.as_str())) {
        return Runs::Evaluates(EVALUATES);
    }
    let mut i = 0;
    let mut operands = 0;
    let mut options_done = false;
    while let Some(arg) = args.get(i) {
        i += 1;
        if !options_done && arg == "--" {
            options_done = true;
            continue;
        }
        if !options_done && (arg.starts_with('-') || arg.starts_with('+')) && arg.len() > 1 {
            let letters = letters(arg);
            if letters
                .iter()
                .any(|l| rules.evaluating.contains(&l.as_str()))
            {
                return Runs::Evaluates(EVALUATES);
            }
            let last = letters.last().map(String::as_str).unwrap_or_default();
            if rules.name_values.contains(&last) {
                match args.get(i) {
                    Some(name) => {
                        if let Some(why) = assignment(name) {
                            return Runs::Evaluates(why);
                        }
                    }
                    None => return Runs::Itself,
                }
                i += 1;
            } else if rules.takes.contains(&last) {
                i += 1;
            }
            continue;
        }
        options_done = true;
        operands += 1;
        if rules.operands_are_names && operands > rules.skip {
            if let Some(why) = assignment(arg) {
                return Runs::Evaluates(why);
            }
        }
    }
    Runs::Itself
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
