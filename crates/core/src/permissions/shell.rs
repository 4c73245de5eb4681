//! A command line split into the simple commands it runs, with a real shell parser
//! (`brush-parser`, the parser of the brush shell): `&&`, `||`, `;`, `|`, `&`, newlines,
//! subshells, brace groups and the bodies of `if`, `for`, `while` and `case` all give up the
//! simple commands inside them. Each comes back as the words it runs, unquoted, so that
//! `git "status"` is `git status` to a rule.
//!
//! What a simple command runs besides itself is [`super::runners`]' to say: the commands a
//! wrapper runs (`timeout 5 rm x`, `find -exec`, `xargs`) and the lines a shell runs (`bash -c`)
//! come back as simple commands of their own; a command that runs code from a file (`make`, the
//! hooks of `git commit`) is marked [`Simple::unseen`].
//!
//! What a rule cannot judge makes the whole line [`Split::Opaque`], with the reason: a command
//! substitution (`$(...)`, backquotes) or a process substitution (`<(...)`) anywhere, words that
//! are code ([`super::runners::Runs::Evaluates`]: `eval`, `source`, `printf -v`, `declare -i`,
//! `python -c`, `git -c`, ...), an assignment to a variable that changes what runs (`PATH`,
//! `LD_PRELOAD`, `IFS`) or to a computed name, a function definition, a command name that is
//! itself an expansion (`$CMD`), ANSI-C quoting (`$'\x72m'`), arithmetic, and anything the
//! parser cannot read. Such a line is always asked about; the simple commands read before the
//! part that made it opaque come with it, so a deny rule still refuses them.

use brush_parser::ast::{
    self, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect,
};
use brush_parser::word::{self, WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions, SourceInfo};

use super::runners::{self, Runs};

/// One simple command of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    /// Its words as the program gets them (quotes and escapes taken off; a parameter such as
    /// `$HOME` as written), joined with one space: what a `run_bash(PATTERN)` is matched against.
    /// Assignments before the name (`FOO=1 cargo test`) are part of it.
    pub text: String,
    /// The same without the assignments before the name (`rm x` of `FOO=1 rm x`): what a deny
    /// or ask rule is also matched against.
    pub bare: String,
    /// The program's name (its first word after any assignments), unquoted.
    pub name: String,
    /// Whether it sends output into a file (`>`, `>>`, `&>`; not `>/dev/null` nor `2>&1`).
    pub writes_file: bool,
    /// Whether it gets arguments the line does not show (the command `xargs` runs): a deny or
    /// ask rule that could match it with some arguments does; no allow rule does.
    pub open_ended: bool,
    /// Why it runs code the line does not show (a build file, git's hooks), if it does: an
    /// allow rule may still allow it, but a deny rule cannot see inside.
    pub unseen: Option<&'static str>,
}

/// What a command line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// Every simple command, in order.
    Commands(Vec<Simple>),
    /// Something no rule can judge; why, and the simple commands read before it (which a deny
    /// rule still refuses: `rm -rf x; echo $(date)`).
    Opaque(&'static str, Vec<Simple>),
}

/// How deep `(`, `{` and `[` may nest before a line is not parsed at all (the parser recurses,
/// and a line of a few hundred `{` would overflow a thread's stack).
const MAX_NESTING: usize = 64;

/// How deep shells in shells (`bash -c "sh -c '...'"`) are read before a line is opaque.
const MAX_SCRIPTS: usize = 8;

/// Splits `line` into its simple commands.
pub fn split(line: &str) -> Split {
    split_at(line, 0)
}

/// [`split`] of a line `depth` shells deep.
fn split_at(line: &str, depth: usize) -> Split {
    if depth > MAX_SCRIPTS {
        return Split::Opaque("it nests shells too deep to be read", Vec::new());
    }
    if nesting(line) > MAX_NESTING {
        return Split::Opaque("it nests too deep to be read", Vec::new());
    }
    if line.contains("$[") {
        return Split::Opaque("it holds arithmetic", Vec::new());
    }
    // Extended globbing off, as in `bash -c`: with it on, `!(rm x)` would read as a pattern
    // where bash runs a subshell.
    let options = ParserOptions {
        enable_extended_globbing: false,
        ..ParserOptions::default()
    };
    let mut parser = Parser::new(
        std::io::BufReader::new(line.as_bytes()),
        &options,
        &SourceInfo::default(),
    );
    let program = match parser.parse_program() {
        Ok(program) => program,
        Err(_) => return Split::Opaque("the shell parser cannot read it", Vec::new()),
    };
    let mut walk = Walk {
        options,
        commands: Vec::new(),
        depth,
    };
    for list in &program.complete_commands {
        if let Err(why) = walk.list(list) {
            return Split::Opaque(why, walk.commands);
        }
    }
    Split::Commands(walk.commands)
}

struct Walk {
    options: ParserOptions,
    commands: Vec<Simple>,
    /// How many shells deep this line is.
    depth: usize,
}

type Walked = Result<(), &'static str>;

impl Walk {
    fn list(&mut self, list: &CompoundList) -> Walked {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first)?;
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(pipeline) | ast::AndOr::Or(pipeline) => {
                        self.pipeline(pipeline)?
                    }
                }
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) -> Walked {
        for command in &pipeline.seq {
            self.command(command)?;
        }
        Ok(())
    }

    fn command(&mut self, command: &Command) -> Walked {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Compound(compound, redirects) => {
                if let Some(redirects) = redirects {
                    for redirect in &redirects.0 {
                        // A compound command's output into a file: its commands write it.
                        self.redirect(redirect)?;
                    }
                }
                let writes = redirects
                    .as_ref()
                    .is_some_and(|r| r.0.iter().any(writes_file));
                let first = self.commands.len();
                self.compound(compound)?;
                if writes {
                    for simple in &mut self.commands[first..] {
                        simple.writes_file = true;
                    }
                }
                Ok(())
            }
            Command::Function(_) => Err("it defines a function"),
            Command::ExtendedTest(_) => Err("it holds a [[ ]] test"),
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) -> Walked {
        match compound {
            CompoundCommand::BraceGroup(group) => self.list(&group.list),
            CompoundCommand::Subshell(subshell) => self.list(&subshell.list),
            CompoundCommand::ForClause(clause) => {
                // `for PATH in .` sets what the body's commands run.
                if clause.variable_name.chars().any(|c| c.is_ascii_uppercase()) {
                    return Err("its loop sets an environment variable");
                }
                for value in clause.values.iter().flatten() {
                    self.unquoted(&value.value)?;
                }
                self.list(&clause.body.list)
            }
            CompoundCommand::CaseClause(clause) => {
                self.unquoted(&clause.value.value)?;
                for case in &clause.cases {
                    for pattern in &case.patterns {
                        self.unquoted(&pattern.value)?;
                    }
                    if let Some(list) = &case.cmd {
                        self.list(list)?;
                    }
                }
                Ok(())
            }
            CompoundCommand::IfClause(clause) => {
                self.list(&clause.condition)?;
                self.list(&clause.then)?;
                for other in clause.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.list(condition)?;
                    }
                    self.list(&other.body)?;
                }
                Ok(())
            }
            CompoundCommand::WhileClause(clause) | CompoundCommand::UntilClause(clause) => {
                self.list(&clause.0)?;
                self.list(&clause.1.list)
            }
            CompoundCommand::Arithmetic(_) | CompoundCommand::ArithmeticForClause(_) => {
                Err("it holds arithmetic")
            }
        }
    }

    fn redirect(&self, redirect: &IoRedirect) -> Walked {
        match redirect {
            IoRedirect::File(_, _, IoFileRedirectTarget::ProcessSubstitution(..)) => {
                Err("it holds a process substitution")
            }
            IoRedirect::File(_, _, IoFileRedirectTarget::Filename(word))
            | IoRedirect::File(_, _, IoFileRedirectTarget::Duplicate(word))
            | IoRedirect::HereString(_, word)
            | IoRedirect::OutputAndError(word, _) => self.unquoted(&word.value).map(drop),
            IoRedirect::File(_, _, IoFileRedirectTarget::Fd(_)) => Ok(()),
            IoRedirect::HereDocument(_, doc) => {
                // Where bash and the parser could disagree on the end, the lines after could
                // be commands to bash: only a plain word, or one quoted whole, ends a document.
                let end = doc.here_end.value.as_str();
                let bare = end
                    .strip_prefix('\'')
                    .and_then(|e| e.strip_suffix('\''))
                    .or_else(|| end.strip_prefix('"').and_then(|e| e.strip_suffix('"')))
                    .unwrap_or(end);
                let plain =
                    !bare.is_empty() && bare.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !plain {
                    return Err("its here-document ends with a word that is not plain");
                }
                if doc.requires_expansion {
                    if doc.doc.value.contains("\\\n") {
                        return Err("its here-document joins lines");
                    }
                    self.unquoted(&doc.doc.value).map(drop)
                } else {
                    Ok(())
                }
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) -> Walked {
        let mut words = Vec::new();
        // Whether any word after the program's name may expand to other words.
        let mut expanding = false;
        let mut name = None;
        let mut writes = false;
        let items = simple
            .prefix
            .iter()
            .flat_map(|p| p.0.iter())
            .map(Some)
            .chain(std::iter::once(None))
            .chain(simple.suffix.iter().flat_map(|s| s.0.iter()).map(Some));
        for item in items {
            match item {
                // The command's name sits between the prefix and the suffix.
                None => {
                    if let Some(word) = &simple.word_or_name {
                        if word.value.contains(['$', '*', '?', '[', '{']) {
                            return Err("its command name is an expansion or a pattern");
                        }
                        let unquoted = self.unquoted(&word.value)?;
                        name = Some(unquoted.clone());
                        words.push(unquoted);
                    }
                }
                Some(CommandPrefixOrSuffixItem::Word(word)) => {
                    let (text, expands) = self.unquoted_word(&word.value)?;
                    expanding |= expands && name.is_some();
                    words.push(text)
                }
                Some(CommandPrefixOrSuffixItem::AssignmentWord(_, word)) => {
                    let assignment = self.unquoted(&word.value)?;
                    if let Some(why) = runners::assignment(&assignment) {
                        return Err(why);
                    }
                    words.push(assignment)
                }
                Some(CommandPrefixOrSuffixItem::IoRedirect(redirect)) => {
                    self.redirect(redirect)?;
                    writes |= writes_file(redirect);
                }
                Some(CommandPrefixOrSuffixItem::ProcessSubstitution(..)) => {
                    return Err("it holds a process substitution")
                }
            }
        }
        let Some(name) = name else {
            // Only assignments or redirections (`FOO=1`, `> file`): no program runs, but what it
            // does is still judged as a command of its own.
            self.commands.push(Simple {
                text: words.join(" "),
                bare: String::new(),
                name: String::new(),
                writes_file: writes,
                open_ended: false,
                unseen: None,
            });
            return Ok(());
        };
        // Words that unquote to a substitution are evaluated by builtins that take variable
        // names (`read 'a[$(...)]'`, `[ -v ... ]`, arithmetic).
        // Backslashes off too: `read 'a[\$\(rm x\)]'` evaluates what they escape.
        if words.iter().any(|w| {
            let plain = w.replace('\\', "");
            plain.contains("$(") || plain.contains('`')
        }) {
            return Err("it holds a command substitution");
        }
        let program: Vec<String> = words.iter().skip_while(|w| **w != name).cloned().collect();
        // A program that reads its words as options, commands or code (a wrapper, a shell,
        // find, sed, awk, git, ...) is judged by those words: one the shell makes from `$x`,
        // `{a,b}` or a pattern could be `-exec`, `rm` or a script no rule saw.
        if expanding && runners::reads_its_words(&name) {
            return Err("its words expand to options or commands no rule can see ($x, {a,b}, *)");
        }
        self.commands.push(Simple {
            text: words.join(" "),
            bare: program.join(" "),
            name,
            writes_file: writes,
            open_ended: false,
            unseen: None,
        });
        self.runs(&program, writes)
    }

    /// What the simple command `words` (the last one pushed) runs besides itself, added as
    /// simple commands of their own ([`runners::runs`]).
    fn runs(&mut self, words: &[String], writes: bool) -> Walked {
        match runners::runs(words) {
            Runs::Itself => Ok(()),
            Runs::Unseen(why) => {
                if let Some(last) = self.commands.last_mut() {
                    last.unseen = Some(why);
                }
                Ok(())
            }
            Runs::Evaluates(why) => Err(why),
            Runs::Script(script) => match split_at(&script, self.depth + 1) {
                Split::Commands(commands) => {
                    self.commands.extend(commands.into_iter().map(|c| Simple {
                        writes_file: c.writes_file || writes,
                        ..c
                    }));
                    Ok(())
                }
                Split::Opaque(why, seen) => {
                    self.commands.extend(seen);
                    Err(why)
                }
            },
            Runs::Commands(inner) => {
                for command in inner {
                    let Some(name) = command.words.first() else {
                        continue;
                    };
                    // Its words came unquoted from ours, which held no expansion but
                    // parameters: a program that is one, or a pattern, is not known.
                    if name.is_empty() || name.contains(['$', '*', '?', '[', '{']) {
                        return Err("it runs a command whose name is an expansion or a pattern");
                    }
                    let text = command.words.join(" ");
                    self.commands.push(Simple {
                        text: text.clone(),
                        bare: text,
                        name: name.clone(),
                        writes_file: writes,
                        open_ended: command.open_ended,
                        unseen: None,
                    });
                    self.runs(command.words, writes)?;
                }
                Ok(())
            }
        }
    }

    /// `raw` as the program gets it: quotes and escapes taken off, parameters as written. An
    /// error for what no rule can judge.
    fn unquoted(&self, raw: &str) -> Result<String, &'static str> {
        self.unquoted_word(raw).map(|(text, _)| text)
    }

    /// [`Walk::unquoted`], and whether the shell may make more or other words of it than the
    /// rule sees: a parameter (quoted or not: `"$x"` may be `-exec`), and, unquoted, a brace
    /// expansion (`{5,rm}`) or a pattern (`*`, `?`, `[`: a file named `-e1e rm x` is a word).
    fn unquoted_word(&self, raw: &str) -> Result<(String, bool), &'static str> {
        if raw.contains("$(") || raw.contains('`') {
            return Err("it holds a command substitution");
        }
        // Every `${` must be a plain `${name}`, whatever the word parser makes of it (bash 5.3
        // runs `${ cmd; }`).
        let mut rest = raw;
        while let Some(at) = rest.find("${") {
            let after = &rest[at..];
            let end = after.find('}').map_or(after.len(), |e| e + 1);
            if !plain_parameter(&after[..end]) {
                return Err("it holds a parameter expansion that could run code");
            }
            rest = &after[end..];
        }
        if raw.contains("<(") || raw.contains(">(") {
            return Err("it holds a process substitution");
        }
        let pieces = word::parse(raw, &self.options).map_err(|_| "a word cannot be read")?;
        let mut text = String::new();
        let mut expands = false;
        unquote(raw, &pieces, &mut text, &mut expands)?;
        // Braces and patterns count across the word's pieces (`{-e,'1e rm x'}` is one brace
        // expansion): the unquoted text as it is, every quoted or escaped piece as one letter.
        let shape: String = pieces
            .iter()
            .map(|piece| match &piece.piece {
                WordPiece::Text(s) => s.as_str(),
                _ => "x",
            })
            .collect();
        expands |= may_expand(&shape);
        Ok((text, expands))
    }
}

/// Whether unquoted text may expand: a pattern, or a brace expansion (`{a,b}`, `{1..3}`; a
/// lone `{}` is itself).
fn may_expand(text: &str) -> bool {
    if text.contains(['*', '?', '[']) {
        return true;
    }
    text.find('{').is_some_and(|open| {
        let rest = &text[open..];
        rest.find('}')
            .is_some_and(|close| rest[..close].contains(',') || rest[..close].contains(".."))
    })
}

fn unquote(
    raw: &str,
    pieces: &[WordPieceWithSource],
    text: &mut String,
    expands: &mut bool,
) -> Walked {
    for piece in pieces {
        match &piece.piece {
            WordPiece::Text(s) => text.push_str(s),
            WordPiece::SingleQuotedText(s) => text.push_str(s),
            WordPiece::EscapeSequence(s) => text.push_str(s.strip_prefix('\\').unwrap_or(s)),
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                // Quoted: no pattern, no braces; a parameter is still the shell's to fill.
                let mut quoted = false;
                unquote(raw, inner, text, &mut quoted)?;
                *expands |= inner
                    .iter()
                    .any(|p| matches!(p.piece, WordPiece::ParameterExpansion(_)));
            }
            WordPiece::TildePrefix(_) => {
                text.push_str(raw.get(piece.start_index..piece.end_index).unwrap_or(""))
            }
            WordPiece::ParameterExpansion(_) => {
                // Only `$name`, `${name}` and the special parameters: the operators of
                // `${...}` assign, evaluate subscripts and expand prompts, which runs code.
                let written = raw.get(piece.start_index..piece.end_index).unwrap_or("");
                if !plain_parameter(written) {
                    return Err("it holds a parameter expansion that could run code");
                }
                *expands = true;
                text.push_str(written)
            }
            WordPiece::AnsiCQuotedText(_) => return Err("it holds ANSI-C quoting ($'...')"),
            WordPiece::CommandSubstitution(_) | WordPiece::BackquotedCommandSubstitution(_) => {
                return Err("it holds a command substitution")
            }
            WordPiece::ArithmeticExpression(_) => return Err("it holds arithmetic"),
        }
    }
    Ok(())
}

/// Whether `written` is `$name`, `${name}`, `$1` or a special parameter (`$?`, `$#`, `$@`, ...).
fn plain_parameter(written: &str) -> bool {
    let Some(rest) = written.strip_prefix('$') else {
        return false;
    };
    let inner = rest
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(rest);
    let name = !inner.is_empty()
        && !inner.starts_with(|c: char| c.is_ascii_digit())
        && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let positional = !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit());
    name || positional || matches!(inner, "?" | "#" | "@" | "*" | "$" | "!" | "-" | "0")
}

/// The deepest nesting of `(`, `{` and `[` in `line`, quotes not considered (a count that can
/// only be too high).
fn nesting(line: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in line.chars() {
        match c {
            '(' | '{' | '[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `redirect` sends output into a file (not `/dev/null`, not another descriptor).
fn writes_file(redirect: &IoRedirect) -> bool {
    match redirect {
        IoRedirect::File(_, kind, target) => {
            let output = matches!(
                kind,
                IoFileRedirectKind::Write
                    | IoFileRedirectKind::Append
                    | IoFileRedirectKind::ReadAndWrite
                    | IoFileRedirectKind::Clobber
            );
            match target {
                IoFileRedirectTarget::Filename(word) => output && word.value != "/dev/null",
                IoFileRedirectTarget::Duplicate(word) => {
                    // `>&2` and `>&-` duplicate or close; `>&file` writes a file.
                    let descriptor = !word.value.is_empty()
                        && word.value.chars().all(|c| c.is_ascii_digit() || c == '-');
                    (output || matches!(kind, IoFileRedirectKind::DuplicateOutput)) && !descriptor
                }
                _ => false,
            }
        }
        IoRedirect::OutputAndError(word, _) => word.value != "/dev/null",
        IoRedirect::HereDocument(..) | IoRedirect::HereString(..) => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<String> {
        match split(line) {
            Split::Commands(commands) => commands.into_iter().map(|c| c.text).collect(),
            Split::Opaque(why, _) => panic!("{line:?} is opaque: {why}"),
        }
    }

    fn opaque(line: &str) -> &'static str {
        match split(line) {
            Split::Opaque(why, _) => why,
            Split::Commands(commands) => panic!("{line:?} split into {commands:?}"),
        }
    }

    #[test]
    fn operators_subshells_and_bodies_give_up_their_simple_commands() {
        assert_eq!(texts("git status"), ["git status"]);
        assert_eq!(
            texts("git status && rm -rf x || echo no; ls | wc -l & sleep 1\npwd"),
            [
                "git status",
                "rm -rf x",
                "echo no",
                "ls",
                "wc -l",
                "sleep 1",
                "pwd"
            ]
        );
        assert_eq!(
            texts("(cd a && make) ; { echo b; }"),
            ["cd a", "make", "echo b"]
        );
        assert_eq!(
            texts("if test -f a; then cat a; else rm b; fi"),
            ["test -f a", "cat a", "rm b"]
        );
        assert_eq!(texts("for f in a b; do rm $f; done"), ["rm $f"]);
        assert_eq!(texts("while true; do sleep 1; done"), ["true", "sleep 1"]);
        assert_eq!(texts("case $x in a) rm a;; esac"), ["rm a"]);
    }

    #[test]
    fn words_are_matched_unquoted_and_spaced_once() {
        assert_eq!(texts(r#"git   "status""#), ["git status"]);
        assert_eq!(texts(r"r\m -rf 'a b'"), ["rm -rf a b"]);
        assert_eq!(texts("FOO=1 cargo test"), ["FOO=1 cargo test"]);
        assert_eq!(texts("echo ~/x $HOME"), ["echo ~/x $HOME"]);
        let Split::Commands(commands) = split("/bin/rm x") else {
            panic!()
        };
        assert_eq!(commands[0].name, "/bin/rm");
    }

    #[test]
    fn output_into_a_file_is_told_apart_from_dev_null_and_descriptors() {
        let writes = |line: &str| match split(line) {
            Split::Commands(commands) => commands.iter().any(|c| c.writes_file),
            Split::Opaque(why, _) => panic!("{why}"),
        };
        for line in [
            "echo x > f",
            "echo x >> f",
            "ls &> out",
            "{ ls; } > f",
            "echo >| f",
        ] {
            assert!(writes(line), "{line}");
        }
        for line in [
            "ls > /dev/null",
            "ls 2>&1",
            "ls >&2",
            "cat < f",
            "cat <<EOF\nx\nEOF",
        ] {
            assert!(!writes(line), "{line}");
        }
    }

    #[test]
    fn what_no_rule_can_judge_is_opaque() {
        for line in [
            "echo $(rm -rf x)",
            "echo `id`",
            "echo \"$(id)\"",
            "diff <(ls a) <(ls b)",
            "eval rm x",
            "source ./x.sh",
            ". ./x.sh",
            "bash -O extglob -c 'rm x'",
            "zsh -c 'rm x'",
            "f() { rm x; }",
            "$CMD x",
            "echo $'\\x72m'",
            "echo $((1 + 2))",
            "git status &&",
            "echo 'unterminated",
        ] {
            let why = opaque(line);
            assert!(!why.is_empty(), "{line}");
        }
        assert_eq!(opaque("ls > >(cat)"), "it holds a process substitution");
    }

    #[test]
    fn what_a_command_runs_comes_back_as_simple_commands_of_its_own() {
        assert_eq!(texts("bash -c 'rm x'"), ["bash -c rm x", "rm x"]);
        assert_eq!(
            texts("timeout 5 sh -ec 'ls; rm y' && echo ok"),
            [
                "timeout 5 sh -ec ls; rm y",
                "sh -ec ls; rm y",
                "ls",
                "rm y",
                "echo ok"
            ]
        );
        assert_eq!(
            texts("find . -exec rm {} +"),
            ["find . -exec rm {} +", "rm {}"]
        );
        let Split::Commands(commands) = split("ls | xargs rm") else {
            panic!()
        };
        assert!(commands[2].open_ended, "{commands:?}");
        let Split::Commands(commands) = split("make test") else {
            panic!()
        };
        assert_eq!(commands[0].unseen, Some("it runs what its build file says"));
        // A shell in a shell in a shell...: read up to a depth, then opaque.
        let mut line = "rm x".to_string();
        for _ in 0..12 {
            line = format!("bash -c {}", shell_quote(&line));
        }
        assert_eq!(opaque(&line), "it nests shells too deep to be read");
        // An inner program that is an expansion is not known; nor is a wrapper's word the
        // shell makes (`{5,rm}` is two words, `$t` may be `-k 5`).
        for line in [
            "timeout 5 $CMD",
            "timeout {5,rm} victim",
            "t='-k 5'; timeout $t 1 rm victim",
        ] {
            assert_eq!(
                opaque(line),
                "its words expand to options or commands no rule can see ($x, {a,b}, *)",
                "{line}"
            );
        }
        // A program that reads no words as commands, or runs unseen code whatever they are,
        // is judged by its words as written.
        assert_eq!(texts("ls *.rs $DIR"), ["ls *.rs $DIR"]);
        assert_eq!(texts("cargo test $FILTER"), ["cargo test $FILTER"]);
        // A lone `{}` (find's) and quoted braces and patterns are words as written.
        assert_eq!(
            texts("find . -name '*.o' -exec rm {} +"),
            ["find . -name *.o -exec rm {} +", "rm {}"]
        );
    }

    /// `text` in single quotes, for a shell.
    fn shell_quote(text: &str) -> String {
        format!("'{}'", text.replace('\'', "'\\''"))
    }

    #[test]
    fn a_long_line_splits() {
        let line = vec!["cargo test --lib"; 100].join(" && ");
        assert_eq!(texts(&line).len(), 100);
    }
}
