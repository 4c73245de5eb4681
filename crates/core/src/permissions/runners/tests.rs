//! Every entry of the table, read as it must be; and the attacks a review found, judged by the
//! rules.

use super::*;

/// What a line's one simple command is taken to run, in short: `itself`, `runs A | B` (the
/// inner commands' words, `…` after an open-ended one), `script LINE`, `unseen`, `evaluates`.
fn class(line: &str) -> String {
    let words: Vec<String> = split_words(line);
    match runs(&words) {
        Runs::Itself => "itself".into(),
        Runs::Commands(inner) => format!(
            "runs {}",
            inner
                .iter()
                .map(|i| format!(
                    "{}{}",
                    i.words.join(" "),
                    if i.open_ended { " …" } else { "" }
                ))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        Runs::Script(script) => format!("script {script}"),
        Runs::Unseen(_) => "unseen".into(),
        Runs::Evaluates(_) => "evaluates".into(),
    }
}

/// Words split at spaces, with `'...'` kept whole (enough for the cases here).
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => word.push(c),
        }
    }
    if any || !word.is_empty() {
        words.push(word);
    }
    words
}

/// One case for each entry of [`TABLE`] (several for some), with what it must be read as.
const CASES: &[(&str, &str)] = &[
    ("time rm x", "runs rm x"),
    ("/usr/bin/time -f %e -o out rm x", "runs rm x"),
    ("nice -n 5 rm x", "runs rm x"),
    ("nice rm x", "runs rm x"),
    ("nohup rm x", "runs rm x"),
    ("setsid -f rm x", "runs rm x"),
    ("stdbuf -o L rm x", "runs rm x"),
    ("stdbuf -oL rm x", "runs rm x"),
    ("timeout -s KILL 5 rm x", "runs rm x"),
    ("timeout --kill-after=2 5s rm x", "runs rm x"),
    ("ionice -c 3 rm x", "runs rm x"),
    ("ionice -p 42", "itself"),
    ("taskset 0x1 rm x", "runs rm x"),
    ("taskset -p 42", "itself"),
    ("chroot / rm x", "runs rm x"),
    ("chroot /srv", "evaluates"),
    ("setpriv --reuid 1000 --init-groups rm x", "runs rm x"),
    ("prlimit --nofile=1024 rm x", "runs rm x"),
    ("prlimit -p 42", "itself"),
    ("fakeroot -- rm x", "runs rm x"),
    ("fakeroot", "evaluates"),
    ("setarch x86_64 -R rm x", "runs rm x"),
    ("setarch x86_64 rm x", "runs rm x"),
    ("linux64 rm x", "runs rm x"),
    ("linux32 rm x", "runs rm x"),
    ("i386 rm x", "runs rm x"),
    ("x86_64 rm x", "runs rm x"),
    ("uname26 rm x", "runs rm x"),
    ("unshare -r rm x", "runs rm x"),
    ("unshare --map-user 0 rm x", "runs rm x"),
    ("unshare --setgroups allow rm x", "runs rm x"),
    // An option no table lists could take the next word: the command is not known.
    ("unshare --some-new-option allow rm x", "evaluates"),
    ("timeout -Q 5 rm x", "evaluates"),
    ("nice -5 rm x", "runs rm x"),
    ("strace -ff -etrace=open -o t rm x", "runs rm x"),
    ("prlimit -n1024 rm x", "runs rm x"),
    ("nsenter -t 1 -m rm x", "runs rm x"),
    ("flock /tmp/l rm x", "runs rm x"),
    ("flock -w 5 /tmp/l -c 'rm x'", "script rm x"),
    ("flock -c 'rm x' /tmp/l", "script rm x"),
    ("env -i FOO=1 rm x", "runs rm x"),
    ("env", "itself"),
    ("env PATH=/tmp/bin ls", "evaluates"),
    ("env LD_PRELOAD=/tmp/x.so ls", "evaluates"),
    ("env -S 'rm x'", "evaluates"),
    ("sudo -u root rm x", "runs rm x"),
    ("sudo -l", "itself"),
    ("sudo -s rm x", "evaluates"),
    ("doas -u root rm x", "runs rm x"),
    ("su -c 'rm x'", "script rm x"),
    ("su root -c 'rm x'", "script rm x"),
    ("su -", "evaluates"),
    ("runuser -u nobody -- rm x", "runs rm x"),
    ("command rm x", "runs rm x"),
    ("command -v rm", "itself"),
    ("builtin printf -v PATH x", "runs printf -v PATH x"),
    ("strace -f -o trace.txt rm x", "runs rm x"),
    ("ltrace rm x", "runs rm x"),
    ("busybox rm x", "runs rm x"),
    ("pkexec rm x", "runs rm x"),
    ("run0 rm x", "runs rm x"),
    ("xargs rm", "runs rm …"),
    ("xargs -0 -I{} rm -f {}", "runs rm -f {} …"),
    ("xargs", "itself"),
    ("bash -c 'rm x'", "script rm x"),
    ("sh -ec 'rm x'", "script rm x"),
    ("bash -o pipefail -c 'rm x'", "script rm x"),
    ("dash -c 'rm x'", "script rm x"),
    ("rbash -c 'rm x'", "script rm x"),
    ("bash build.sh", "unseen"),
    ("bash", "evaluates"),
    ("bash -O extglob -c 'rm x'", "evaluates"),
    ("bash -l -c 'rm x'", "evaluates"),
    ("watch -n 1 rm x", "script rm x"),
    ("watch -x rm x", "runs rm x"),
    ("find . -name '*.o' -exec rm {} +", "runs rm {}"),
    ("find . -execdir rm {} ; -ok ls {} ;", "runs rm {} | ls {}"),
    ("find . -delete", "evaluates"),
    ("find . -fprint out", "evaluates"),
    ("find . -name x", "itself"),
    ("git status", "unseen"),
    ("git log --oneline", "unseen"),
    ("git -C sub diff", "unseen"),
    ("git --no-pager show HEAD", "unseen"),
    ("git --version", "itself"),
    ("git ls-remote --upload-pack=x .", "unseen"),
    ("git -c alias.zz='!rm w7' zz", "evaluates"),
    ("git --config-env=core.pager=X log", "evaluates"),
    ("git zz", "unseen"),
    ("git commit -m x", "unseen"),
    ("git push", "unseen"),
    ("awk '{print $1}' f", "itself"),
    ("awk 'BEGIN{system(\"rm x\")}'", "evaluates"),
    ("gawk '{print | \"sh\"}' f", "evaluates"),
    ("mawk -f prog.awk f", "unseen"),
    ("nawk -e 'BEGIN{system(1)}'", "evaluates"),
    ("busybox-awk 'BEGIN{system(1)}'", "evaluates"),
    ("sed -n '1e rm w9' f", "evaluates"),
    ("sed 's/a/b/e' f", "evaluates"),
    ("sed 's/a/b/w out' f", "evaluates"),
    ("sed -e '1w out' f", "evaluates"),
    ("sed -i 's/a/b/g; /x/d' f", "itself"),
    ("gsed -n '/start/,/end/p' f", "itself"),
    ("sed '/a/a\\ text' f", "itself"),
    ("sed 'y/abc/xyz/' f", "itself"),
    ("sed -f script.sed f", "unseen"),
    ("sed 's/a/b/Q' f", "evaluates"),
    ("python3 -c 'import os'", "evaluates"),
    ("python -m pytest", "unseen"),
    ("python2 x.py", "unseen"),
    ("python3 --version", "itself"),
    ("pypy -c 1", "evaluates"),
    ("pypy3 -", "evaluates"),
    ("perl -e 'unlink q(x)'", "evaluates"),
    ("perl -pi -e 's/a/b/' f", "evaluates"),
    ("ruby -e 'File.delete(1)'", "evaluates"),
    ("node -e 'require(1)'", "evaluates"),
    ("nodejs --eval=1", "evaluates"),
    ("deno eval 1", "evaluates"),
    ("bun x.ts", "unseen"),
    ("php -r 'unlink(1);'", "evaluates"),
    ("lua -e 'os.execute(1)'", "evaluates"),
    ("luajit x.lua", "unseen"),
    ("tclsh x.tcl", "unseen"),
    ("wish x.tcl", "unseen"),
    ("Rscript -e 'system(1)'", "evaluates"),
    ("osascript -e 'do shell script 1'", "evaluates"),
    ("nvim --headless -c '!rm x'", "evaluates"),
    ("vim +'!rm x' f", "evaluates"),
    ("ex -c q f", "evaluates"),
    ("emacs --eval '(x)'", "evaluates"),
    ("printf -v v x", "evaluates"),
    ("printf '%s' -v", "itself"),
    ("declare -i n", "evaluates"),
    ("typeset -n r=x", "evaluates"),
    ("local -gi n", "evaluates"),
    ("export PATH=/tmp/bin", "evaluates"),
    ("export FOO=1", "itself"),
    ("readonly IFS", "evaluates"),
    ("declare 'a[i]=1'", "evaluates"),
    ("declare 'a[1]=1'", "itself"),
    ("declare -a 'a=([i]=1)'", "evaluates"),
    ("read -r line", "itself"),
    ("read -r $v", "evaluates"),
    ("read -ra 'a[$i]'", "evaluates"),
    ("read -p 'name? ' name", "itself"),
    ("read PATH", "evaluates"),
    ("mapfile -C 'rm v5 #' -c 1 arr", "evaluates"),
    ("readarray -t lines", "itself"),
    ("getopts ab: opt", "itself"),
    ("getopts ab: 'o[$x]'", "evaluates"),
    ("wait -p 'a[$i]'", "evaluates"),
    ("wait -p pid", "itself"),
    ("unset 'a[i]'", "evaluates"),
    ("unset x", "itself"),
    ("test -v x", "evaluates"),
    ("test -n x -a -v y", "evaluates"),
    ("[ -R x ]", "evaluates"),
    ("[ -f x ]", "itself"),
    ("tar --to-command='rm x' -xf a.tar", "evaluates"),
    ("gtar -I 'sh -c rm' -cf a.tar x", "evaluates"),
    ("bsdtar -xf a.tar", "itself"),
    ("rsync -e 'sh -c rm' a b:", "evaluates"),
    ("rsync -a a/ b/", "itself"),
    ("scp -o ProxyCommand='rm x' a h:", "evaluates"),
    ("sftp -S x h", "evaluates"),
    ("compgen -C 'rm v6 #' x", "evaluates"),
    ("complete -C x y", "evaluates"),
    ("eval rm x", "evaluates"),
    ("source x.sh", "evaluates"),
    (". x.sh", "evaluates"),
    ("exec rm x", "evaluates"),
    ("let x=1", "evaluates"),
    ("trap 'rm x' EXIT", "evaluates"),
    ("alias ls='rm x'", "evaluates"),
    ("hash -p /tmp/x ls", "evaluates"),
    ("enable -f x.so y", "evaluates"),
    ("shopt -s expand_aliases", "evaluates"),
    ("set -e", "evaluates"),
    ("coproc rm x", "evaluates"),
    ("bind -x x", "evaluates"),
    ("fc -s", "evaluates"),
    ("zsh -c 'rm x'", "evaluates"),
    ("ksh -c 'rm x'", "evaluates"),
    ("fish -c 'rm x'", "evaluates"),
    ("csh -c x", "evaluates"),
    ("tcsh -c x", "evaluates"),
    ("mksh -c x", "evaluates"),
    ("yash -c x", "evaluates"),
    ("expect -c x", "evaluates"),
    ("script -c 'rm x'", "evaluates"),
    ("parallel rm ::: a b", "evaluates"),
    ("ssh host rm x", "evaluates"),
    ("ansible all -a 'rm x'", "evaluates"),
    ("tmux new -d 'rm x'", "evaluates"),
    ("screen -dm rm x", "evaluates"),
    ("at now", "evaluates"),
    ("batch", "evaluates"),
    ("crontab x", "evaluates"),
    ("systemd-run rm x", "evaluates"),
    ("make", "unseen"),
    ("gmake test", "unseen"),
    ("bmake", "unseen"),
    ("just build", "unseen"),
    ("ninja", "unseen"),
    ("rake", "unseen"),
    ("ls -la", "itself"),
    ("cargo test", "unseen"),
    ("npm test", "unseen"),
    ("npx vitest", "unseen"),
    ("yarn build", "unseen"),
    ("pnpm i", "unseen"),
    ("go generate", "unseen"),
    ("gradle build", "unseen"),
    ("mvn test", "unseen"),
    ("pip install -e .", "unseen"),
    ("pip3 install x", "unseen"),
    ("pytest -q", "unseen"),
    ("tox", "unseen"),
    ("nox", "unseen"),
    ("cmake --build b", "unseen"),
    ("meson compile", "unseen"),
    ("bazel test //...", "unseen"),
    ("dotnet test", "unseen"),
    ("uv run x", "unseen"),
    ("uvx ruff", "unseen"),
    ("poetry run x", "unseen"),
    ("pipenv run x", "unseen"),
    ("composer install", "unseen"),
    ("xdg-open a.html", "unseen"),
    ("./build.sh", "unseen"),
    ("/lib64/ld-linux-x86-64.so.2 /bin/rm x", "evaluates"),
    ("chrt -o 0 rm x", "runs rm x"),
    ("chrt -p 42", "itself"),
    ("choom -n 1000 -- rm x", "runs rm x"),
    ("toybox rm x", "runs rm x"),
    ("fd -e o -x rm", "evaluates"),
    ("fdfind --exec-batch rm", "evaluates"),
    ("fd pattern", "itself"),
    ("rg --pre rm x", "evaluates"),
    ("rg -n pattern", "itself"),
    ("sg wheel -c 'rm x'", "evaluates"),
    ("capsh -- -c 'rm x'", "evaluates"),
    ("ed -s f", "evaluates"),
    ("red f", "evaluates"),
    ("m4 f", "evaluates"),
    ("dc -e x", "evaluates"),
    ("gdb -batch -ex 'shell rm x'", "evaluates"),
    ("sqlite3 :memory: '.shell rm x'", "evaluates"),
    ("vi -es -c '!rm x'", "evaluates"),
    ("view f", "evaluates"),
    ("rvim f", "evaluates"),
    ("gvim f", "evaluates"),
    ("python3.12 -c 'import os'", "evaluates"),
    ("perl5.36.0 -e 'unlink 1'", "evaluates"),
    ("env - rm x", "runs rm x"),
    ("flock lk=1 rm x", "runs rm x"),
    ("xargs --eof rm x", "runs rm x …"),
    ("find . -exec env -u + rm x ;", "runs env -u + rm x"),
    ("sed ':a;1e rm x' f", "evaluates"),
    ("sed -e'1e rm x' f", "evaluates"),
    ("sed --expr='1e rm x' f", "evaluates"),
    ("sed -ne p -e '1e rm x' f", "evaluates"),
    ("sed -i.bak 's/a/b/' f", "itself"),
    ("sed --bogus 'p' f", "evaluates"),
    ("gawk -e'BEGIN{system(1)}' f", "evaluates"),
    ("gawk --source='BEGIN{system(1)}' f", "evaluates"),
    ("awk -fevil.awk f", "unseen"),
    ("awk '@include \"x\"' f", "evaluates"),
    ("awk -F: '{print $1}' f", "itself"),
    ("rsync -ae 'rm x' . h:", "evaluates"),
    (
        "tar --checkpoint=1 --checkpoint-act=exec=x -cf a .",
        "evaluates",
    ),
    ("tar -xI x -f a.tar", "evaluates"),
    ("tar xIf x a.tar", "evaluates"),
    ("tar -xzf a.tar", "itself"),
    ("scp -qo ProxyCommand=x a h:", "evaluates"),
];

#[test]
fn each_entry_of_the_table_is_read_as_it_runs() {
    let mut wrong = Vec::new();
    for (line, want) in CASES {
        let got = class(line);
        if got != *want {
            wrong.push(format!("{line:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_name_in_the_table_has_a_case() {
    let missing: Vec<&str> = TABLE
        .iter()
        .flat_map(|(names, _)| names.iter().copied())
        .filter(|name| {
            !CASES.iter().any(|(line, _)| {
                let program = split_words(line).into_iter().next().unwrap_or_default();
                base(&program) == *name
            })
        })
        .collect();
    assert!(missing.is_empty(), "no case for {missing:?}");
}

#[test]
fn names_and_assignments_that_evaluate_or_redirect_commands_are_told_apart() {
    for name in ["a", "_x1", "a[0]", "A_B[12]"] {
        assert!(plain_name(name), "{name}");
    }
    for name in ["1a", "a[i]", "a[$i]", "a[]", "a[1", "", "a-b", "a[1+1]"] {
        assert!(!plain_name(name), "{name}");
    }
    assert_eq!(assignment("FOO=1"), None);
    assert_eq!(assignment("a=(1 2)"), None);
    assert_eq!(assignment("a=([0]=x [3]=y)"), None);
    for word in [
        "PATH=/tmp/bin",
        "PATH+=:/tmp",
        "LD_PRELOAD=x",
        "BASH_FUNC_ls%%=x",
        "IFS=x",
        "GIT_SSH_COMMAND=x",
        "a[i]=1",
        "a=([k]=1)",
    ] {
        assert!(assignment(word).is_some(), "{word}");
    }
}
