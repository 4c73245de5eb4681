use proptest::prelude::*;

use super::*;

fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> Rules {
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Rules::parse(&owned(allow), &owned(ask), &owned(deny)).unwrap()
}

fn command(line: &str) -> Action {
    Action::Command {
        command: line.into(),
    }
}

fn edit(rel: &str) -> Action {
    Action::Edit { rel: rel.into() }
}

#[test]
fn a_star_matches_anything_and_the_rest_only_itself() {
    assert!(wildcard("git status", "git status"));
    assert!(!wildcard("git status", "git status -s"));
    assert!(!wildcard("git status", "git statu"));
    assert!(wildcard("cargo test *", "cargo test --lib -- a b"));
    assert!(wildcard("cargo test *", "cargo test"));
    assert!(!wildcard("cargo test *", "cargo testx"));
    assert!(wildcard("rm *", "rm -rf /"));
    assert!(wildcard("*", ""));
    assert!(wildcard("a*b*c", "a xx b yy c"));
    assert!(!wildcard("a*b*c", "a xx b yy"));
    assert!(wildcard("é*ü", "é x ü"));
    assert!(wildcard("a*é", "aé"));
    assert!(!wildcard("a*é", "ae"));
    // `?` and brackets are plain characters here.
    assert!(!wildcard("ls ?", "ls a"));
    assert!(wildcard("ls [a]", "ls [a]"));
}

#[test]
fn a_bad_rule_is_named_with_what_is_wrong() {
    let bad = |text: &str| {
        Rules::parse(&[text.to_string()], &[], &[])
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        bad("run_bash git status"),
        "the rule 'run_bash git status' in permissions.allow: write run_bash(PATTERN) or edit_file(GLOB)"
    );
    assert!(bad("run_bash(ls").contains("it must end with ')'"));
    assert!(bad("edit_file()").contains("is empty"));
    assert!(bad("edit_file(src/[)").contains("the glob cannot be read"));
    assert!(bad("read_file(*)").contains("never asked about"));
    assert!(bad("Bash(ls)").contains("there is no tool 'Bash'"));
    let denied = Rules::parse(&[], &[], &["rm *)".to_string()])
        .unwrap_err()
        .to_string();
    assert!(denied.contains("in permissions.deny"), "{denied}");
}

#[test]
fn every_simple_command_must_be_allowed_and_none_denied() {
    let r = rules(
        &[
            "run_bash(git status)",
            "run_bash(cargo test *)",
            "run_bash(echo *)",
        ],
        &[],
        &[],
    );
    for (line, judged) in [
        ("git status", Judgement::Allow),
        ("cargo test --lib", Judgement::Allow),
        ("git status && cargo test", Judgement::Allow),
        ("git status && rm -rf x", Judgement::Undecided),
        // Output into a file is never allowed by a rule.
        ("git status > .git/hooks/pre-commit", Judgement::Undecided),
        ("git status > /dev/null 2>&1", Judgement::Allow),
        ("echo $HOME ${HOME} $1 $?", Judgement::Allow),
    ] {
        assert_eq!(r.judge(&command(line)), judged, "{line}");
    }
    assert!(matches!(
        r.judge(&command("git status $(rm -rf x)")),
        Judgement::Opaque { .. }
    ));
    assert_eq!(r.judge(&command("")), Judgement::Undecided);
}

#[test]
fn deny_beats_ask_beats_allow() {
    let r = rules(
        &["run_bash(*)", "edit_file(**)"],
        &["run_bash(git push *)", "edit_file(**/*.lock)"],
        &["run_bash(rm *)", "edit_file(.env)"],
    );
    assert_eq!(
        r.judge(&command("ls && rm -rf x")),
        Judgement::Deny {
            rule: "'run_bash(rm *)' in permissions.deny".into()
        }
    );
    assert_eq!(
        Judgement::refusal("'run_bash(rm *)' in permissions.deny"),
        "Refused by the rule 'run_bash(rm *)' in permissions.deny."
    );
    // The program by its base name, quoted or escaped: still `rm`.
    for line in [
        "/bin/rm -rf x",
        "\"rm\" x",
        "r\\m x",
        "(cd a; rm x)",
        "ls | rm x",
    ] {
        assert!(
            matches!(r.judge(&command(line)), Judgement::Deny { .. }),
            "{line}"
        );
    }
    assert_eq!(
        r.judge(&command("git push origin main")),
        Judgement::Ask {
            rule: "'run_bash(git push *)' in permissions.ask".into()
        }
    );
    assert_eq!(r.judge(&command("git push")), r.judge(&command("git push")));
    assert_eq!(r.judge(&edit("src/a.rs")), Judgement::Allow);
    assert!(matches!(
        r.judge(&edit("a/b/Cargo.lock")),
        Judgement::Ask { .. }
    ));
    assert!(matches!(r.judge(&edit(".env")), Judgement::Deny { .. }));
}

#[test]
fn a_glob_star_stays_within_a_component_and_two_cross_them() {
    let r = rules(&["edit_file(src/*.rs)", "edit_file(docs/**)"], &[], &[]);
    assert_eq!(r.judge(&edit("src/a.rs")), Judgement::Allow);
    assert_eq!(r.judge(&edit("src/a/b.rs")), Judgement::Undecided);
    assert_eq!(r.judge(&edit("docs/a/b/c.md")), Judgement::Allow);
    assert_eq!(r.judge(&edit("docsx/a.md")), Judgement::Undecided);
    let lock = rules(&["edit_file(**/*.lock)"], &[], &[]);
    assert_eq!(lock.judge(&edit("Cargo.lock")), Judgement::Allow);
    assert_eq!(lock.judge(&edit("a/b/yarn.lock")), Judgement::Allow);
}

#[test]
fn a_name_shown_quoted_is_matched_by_what_it_names() {
    // `keys/x\x01.pem` is shown (and reaches the gate) as `keys/"x\x01.pem"`.
    let r = rules(&[], &[], &["edit_file(**/*.pem)"]);
    assert!(matches!(
        r.judge(&edit(r#"keys/"x\x01.pem""#)),
        Judgement::Deny { .. }
    ));
    assert!(matches!(
        r.judge(&edit(r#""new\nline.pem""#)),
        Judgement::Deny { .. }
    ));
    assert_eq!(r.judge(&edit(r#"keys/"x\x01.txt""#)), Judgement::Undecided);
}

#[test]
fn a_denied_command_before_what_cannot_be_judged_is_still_denied() {
    let r = rules(&[], &[], &["run_bash(rm *)"]);
    assert!(matches!(
        r.judge(&command("rm -rf x; echo $(date)")),
        Judgement::Deny { .. }
    ));
    assert!(matches!(
        r.judge(&command("ls && rm x && bash -c 'y'")),
        Judgement::Deny { .. }
    ));
    assert!(matches!(
        r.judge(&command("echo $(date); rm -rf x")),
        Judgement::Opaque { .. }
    ));
}

#[test]
fn with_deny_rules_an_opaque_line_is_not_auto_approved() {
    let none = rules(&[], &[], &[]);
    let deny = rules(&[], &[], &["run_bash(rm *)"]);
    let opaque = deny.judge(&command("echo $(rm -rf x)"));
    assert!(matches!(opaque, Judgement::Opaque { .. }));
    assert!(!deny.auto_approvable(&opaque));
    assert!(none.auto_approvable(&opaque));
    assert!(!deny.auto_approvable(&deny.judge(&command("rm x"))));
    assert!(deny.auto_approvable(&deny.judge(&command("ls"))));
}

const ALLOWED: &[&str] = &[
    "git status",
    "cargo test --lib",
    "ls -la src",
    "echo 'a b'",
    "grep -n x file.rs",
];
const DENIED: &[&str] = &["rm -rf x", "/usr/bin/rm x", "rm"];
const OPERATORS: &[&str] = &[" && ", " || ", "; ", " | ", " & ", "\n"];

fn allow_rules() -> Rules {
    rules(
        &[
            "run_bash(git status)",
            "run_bash(cargo test *)",
            "run_bash(ls *)",
            "run_bash(echo *)",
            "run_bash(grep *)",
        ],
        &[],
        &["run_bash(rm *)"],
    )
}

fn line_of(commands: &[&str], operators: &[usize], subshell: bool) -> String {
    let mut line = String::new();
    for (i, c) in commands.iter().enumerate() {
        if i > 0 {
            line.push_str(OPERATORS[operators[i - 1] % OPERATORS.len()]);
        }
        if subshell && i == 0 {
            line.push_str(&format!("({c})"));
        } else {
            line.push_str(c);
        }
    }
    line
}

proptest! {
    #[test]
    fn a_line_of_allowed_commands_is_allowed(
        picks in prop::collection::vec(0..ALLOWED.len(), 1..8),
        operators in prop::collection::vec(0..OPERATORS.len(), 8),
        subshell in any::<bool>(),
    ) {
        let commands: Vec<&str> = picks.iter().map(|i| ALLOWED[*i]).collect();
        let line = line_of(&commands, &operators, subshell);
        prop_assert_eq!(allow_rules().judge(&command(&line)), Judgement::Allow, "{}", line);
    }

    #[test]
    fn a_denied_command_anywhere_denies_the_line(
        picks in prop::collection::vec(0..ALLOWED.len(), 1..8),
        operators in prop::collection::vec(0..OPERATORS.len(), 9),
        denied in 0..DENIED.len(),
        at in 0usize..8,
        subshell in any::<bool>(),
    ) {
        let mut commands: Vec<&str> = picks.iter().map(|i| ALLOWED[*i]).collect();
        let at = at % (commands.len() + 1);
        commands.insert(at, DENIED[denied]);
        let line = line_of(&commands, &operators, subshell);
        let judged = allow_rules().judge(&command(&line));
        prop_assert!(matches!(judged, Judgement::Deny { .. }), "{} judged {:?}", line, judged);
    }
}

/// Lines an attacker built against `allow = { git status, echo *, cargo test *, ls * }` and
/// `deny = { rm * }`, each checked against bash 5.2 (it ran code, wrote a file or removed one).
/// None may be allowed by the rules.
#[test]
fn lines_that_bash_runs_differently_are_never_allowed() {
    let r = rules(
        &[
            "run_bash(git status)",
            "run_bash(echo *)",
            "run_bash(cargo test *)",
            "run_bash(ls *)",
        ],
        &[],
        &["run_bash(rm *)"],
    );
    for line in [
        // Parameter expansions that run code without a `$(` written.
        r"echo ${x:=\$\(touch p\)}${x@P}",
        r"echo ${x:=a[\$\(touch p\)]} ${b[x]}",
        r"echo ${!x}",
        r"echo ${PWD:x}",
        "echo $[x]",
        r"echo <<< ${x:=\$\(touch p\)}${x@P}",
        r"ls ${x:=\$\(touch p\)}${x@P}",
        "echo ${ rm m; }",
        // Here-documents whose end bash and the parser could disagree on.
        "echo <<$'E'\nE\nrm m\n$E",
        "echo <<$\"E\"\nE\nrm m\n$E",
        "echo <<E\nE\\\n\nrm m\nE",
        "echo ${x:-<<E}\nrm m\nE",
        "echo $[1<<E]\nrm m\nE]",
        // `>&file` writes a file.
        "echo x >&f",
        "echo x 1>&f",
        "echo x >&2file",
        "{ echo x; } >&f",
        "git status >&f",
        // A loop variable that sets what runs.
        "for PATH in .; do ls; done",
        "for PATH in .:$PATH; do cargo test; done",
        // Too deep for the parser's stack.
        &format!("{}echo x{}", "{ ".repeat(300), " ;}".repeat(300)),
        &format!("echo {}x", "${x:-".repeat(300)),
    ] {
        let judged = r.judge(&command(line));
        assert_ne!(judged, Judgement::Allow, "{line:?}");
    }
}

/// Lines that remove a file in bash and must therefore be denied, or not judged at all (so
/// never run under auto_approve while deny rules exist).
#[test]
fn lines_that_run_rm_are_denied_or_opaque() {
    let r = rules(
        &["run_bash(echo *)", "run_bash(ls *)"],
        &[],
        &["run_bash(rm *)"],
    );
    for line in [
        "FOO=1 rm m",
        "LC_ALL=C rm x",
        "r${x}m m",
        "r$@m m",
        "rm${x} m",
        "/bin/r[m] m",
        "{rm,m}",
        "!(rm m)",
        "echo ok &&!(rm m)",
        "coproc rm m",
        "command rm m",
        "exec rm m",
        "trap 'rm m' EXIT",
        "hash -p /bin/rm ls; ls m",
        "shopt -s expand_aliases\nalias ls=rm\nls m",
        r"x=a[\$\(rm\ m\)]; let x",
        r#"x=a[\$\(rm\ m\)]; [ -v "$x" ]"#,
        r"read -r 'a[\$\(rm\ m\)]' <<< x",
        "bash <<< 'rm m'",
        "echo rm m | bash",
        "sh <<E\nrm m\nE",
        "env rm m",
        "sudo rm m",
        "xargs rm < list",
        "find . -name m -delete",
        "find . -exec rm {} +",
    ] {
        let judged = r.judge(&command(line));
        assert!(
            matches!(judged, Judgement::Deny { .. } | Judgement::Opaque { .. }),
            "{line:?} judged {judged:?}"
        );
        assert!(
            !r.auto_approvable(&judged),
            "{line:?} would run under auto_approve"
        );
    }
}

/// The lines an attack review of the rules found allowed under auto_approve past
/// `deny = { "run_bash(rm *)" }`: each must now be denied, or be a line the deny rules cannot
/// see into (so never run unasked).
#[test]
fn lines_that_ran_rm_past_a_deny_rule_are_denied_or_not_auto_approved() {
    let r = rules(&[], &[], &["run_bash(rm *)"]);
    let lines = [
        "env - rm victim",
        "flock lk=1 rm victim",
        "timeout {5,rm} victim",
        "t='-k 5'; timeout $t 1 rm victim",
        "find victim -{delete,quit}",
        "x=-exec; find . -maxdepth 0 $x rm victim \\;",
        "find . -maxdepth 0 {-exec,rm} victim \\;",
        "find . -maxdepth 0 -exec env -u + rm victim \\;",
        "xargs --eof rm victim </dev/null",
        "sed ':a;1e rm victim' f",
        "sed -e'1e rm victim' x",
        "sed -e p {-e,'1e rm victim'} f",
        "sed --expr='1e rm victim' f",
        "gawk -e'BEGIN{system(\"rm victim\")}' /dev/null",
        "gawk --source='BEGIN{system(\"rm victim\")}' /dev/null",
        "awk -fevil.awk /dev/null",
        "awk {-f,evil.awk} /dev/null",
        "p='BEGIN{system(\"rm victim\")}'; awk \"$p\"",
        "awk '@include \"evil.awk\"' /dev/null",
        "tar --checkpoint=1 --checkpoint-act=exec='rm victim' -cf /dev/null .",
        "tar -xI 'rm victim #' -f a.tar",
        "rsync -ae 'rm victim --' . h:x",
        "scp -qo ProxyCommand='rm victim' a h:b",
        "git ls-remote --upload-pack='rm victim;:' .",
        "git grep --open-files-in-pager=rm -l . -- victim",
        "git config diff.external 'rm victim;:' && git diff HEAD~1",
        "chrt -o 0 rm victim",
        "choom -n 1000 -- rm victim",
        "sg users -c 'rm victim'",
        "capsh -- -c 'rm victim'",
        "/lib64/ld-linux-x86-64.so.2 /bin/rm victim",
        "toybox rm victim",
        "python3.12 -c 'import os;os.remove(\"victim\")'",
        "perl5.36.0 -e 'unlink q(victim)'",
        "vi -es -c '!rm victim' -c q",
        "ed -s /dev/null <<< '!rm victim'",
        "m4 <<< 'syscmd(rm victim)'",
        "dc -e '!rm victim'",
        "gdb -batch -ex 'shell rm victim'",
        "sqlite3 :memory: '.shell rm victim'",
        "fd -x rm",
        "rg --pre rm . victim",
        "cargo test",
        "./run.sh",
    ];
    let mut through = Vec::new();
    for line in lines {
        let judged = r.judge(&command(line));
        if r.auto_approvable(&judged) {
            through.push(format!("{line:?}: {judged:?}"));
        }
    }
    assert!(through.is_empty(), "let through:\n{}", through.join("\n"));
}
