//! Permission rules: `allow`, `ask` and `deny` lists of `run_bash(PATTERN)` and `edit_file(GLOB)`
//! from the person's own configuration, judged in the executor before anyone is asked.
//!
//! - A `run_bash` PATTERN is matched against each simple command of a line
//!   ([`shell::split`]): `*` matches any characters, spaces included, and everything else only
//!   itself. A line is allowed by the rules only when every simple command is allowed, none
//!   sends output into a file, and nothing in it is beyond judging ([`shell::Split::Opaque`]); it
//!   is denied when any simple command is (also by the program's base name: `/bin/rm x` is
//!   `rm x` to a deny rule).
//! - An `edit_file` GLOB is matched against the workspace-relative path: `*` within a
//!   component, `**` across them (`globset`, with `/` a separator).
//!
//! Deny beats ask, ask beats allow, and allow beats the session's grants ([`crate::approval`]
//! applies the order). `read_file` and `list_files` are never asked about, so they have no rules.

pub mod runners;
pub mod saved;
pub mod shell;

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

use agent_nvim_vocab::approval::Action;
use shell::Split;

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    Allow,
    Ask,
    Deny,
}

impl List {
    /// Its name in the configuration (`permissions.deny`).
    pub fn name(self) -> &'static str {
        match self {
            List::Allow => "permissions.allow",
            List::Ask => "permissions.ask",
            List::Deny => "permissions.deny",
        }
    }
}

/// What a rule matches.
#[derive(Debug, Clone)]
enum Pattern {
    /// A simple command, `*` matching anything.
    Command(String),
    /// A workspace-relative path.
    Path(GlobMatcher),
}

/// One rule, as written (`run_bash(cargo test *)`) and compiled.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule as the person wrote it, trimmed.
    pub text: String,
    /// The list it is in.
    pub list: List,
    pattern: Pattern,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' in {}", self.text, self.list.name())
    }
}

/// A rule that cannot be read: which, in which list, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the rule '{text}' in {}: {why}", list.name())]
pub struct RuleError {
    /// The rule as written (trimmed).
    pub text: String,
    /// The list it is in.
    pub list: List,
    /// What is wrong, and what to write instead.
    pub why: String,
}

impl Rule {
    /// Reads one rule of `list`; the error names it and says what is wrong.
    pub fn parse(list: List, text: &str) -> Result<Rule, RuleError> {
        let text = text.trim();
        let bad = |why: &str| RuleError {
            text: text.to_string(),
            list,
            why: why.to_string(),
        };
        let Some((tool, rest)) = text.split_once('(') else {
            return Err(bad("write run_bash(PATTERN) or edit_file(GLOB)"));
        };
        let Some(inner) = rest.strip_suffix(')') else {
            return Err(bad("it must end with ')'"));
        };
        if inner.trim().is_empty() {
            return Err(bad("the pattern inside the parentheses is empty"));
        }
        let pattern =
            match tool.trim() {
                "run_bash" => Pattern::Command(inner.to_string()),
                "edit_file" => {
                    let glob = GlobBuilder::new(inner)
                        .literal_separator(true)
                        .backslash_escape(true)
                        .build()
                        .map_err(|err| bad(&format!("the glob cannot be read ({})", err.kind())))?;
                    Pattern::Path(glob.compile_matcher())
                }
                "read_file" | "list_files" => return Err(bad(
                    "read_file and list_files are never asked about, so no rule applies to them",
                )),
                other => {
                    return Err(bad(&format!(
                        "there is no tool '{other}'; rules are for run_bash and edit_file"
                    )))
                }
            };
        Ok(Rule {
            text: text.to_string(),
            list,
            pattern,
        })
    }

    fn matches_command(&self, command: &shell::Simple) -> bool {
        let Pattern::Command(pattern) = &self.pattern else {
            return false;
        };
        if command.open_ended {
            // Arguments the line does not show follow: no allow rule can know them, and a deny
            // or ask rule that some arguments would match does match.
            return self.list != List::Allow
                && [&command.bare, &base_named(command)]
                    .iter()
                    .any(|text| could_match(pattern, text));
        }
        if wildcard(pattern, &command.text) {
            return true;
        }
        // A deny or ask rule also sees the command without the assignments before it.
        if self.list != List::Allow
            && command.bare != command.text
            && wildcard(pattern, &command.bare)
        {
            return true;
        }
        // A deny rule also sees the program by its base name.
        self.list == List::Deny
            && command.name.contains('/')
            && wildcard(pattern, &base_named(command))
    }

    fn matches_path(&self, rel: &str) -> bool {
        match &self.pattern {
            // A name with control characters is shown quoted (`"x\x01.pem"`); the rule is
            // matched against the name itself too, so the quotes cannot hide it from
            // `**/*.pem`.
            Pattern::Path(glob) => {
                glob.is_match(rel)
                    || (rel.contains('"')
                        && glob
                            .is_match(std::path::Path::new(&*crate::workspace::names::parse(rel))))
            }
            Pattern::Command(_) => false,
        }
    }
}

/// `command`'s words with its program by its base name (`rm x` of `/bin/rm x`).
fn base_named(command: &shell::Simple) -> String {
    match command.name.rsplit('/').next() {
        Some(base) if command.name.contains('/') => command.bare.replacen(&command.name, base, 1),
        _ => command.bare.clone(),
    }
}

/// Whether `text`, alone or followed by some arguments (a space, then anything), could match
/// `pattern`: for a command that gets arguments the line does not show.
fn could_match(pattern: &str, text: &str) -> bool {
    if wildcard(pattern, text) {
        return true;
    }
    let with_arguments = format!("{text} ");
    match pattern.split_once('*') {
        // Past the literal head a `*` can take anything, so only the head must agree.
        Some((head, _)) => with_arguments.starts_with(head) || head.starts_with(&with_arguments),
        None => pattern.starts_with(&with_arguments),
    }
}

/// What the rules say about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Refused, whatever else allows it (auto_approve included).
    Deny { rule: String },
    /// Asked about, even when the session's grants would allow it.
    Ask { rule: String },
    /// Allowed without asking.
    Allow,
    /// No rule decides: grants, auto_approve or the person do.
    Undecided,
    /// A command line no rule can judge ([`Split::Opaque`]): never allowed by a rule, and,
    /// where deny rules for commands exist, never allowed without a person (a deny rule could
    /// not see inside it).
    Opaque { why: &'static str },
}

impl Judgement {
    /// The result the model reads for a denied call.
    pub fn refusal(rule: &str) -> String {
        format!("Refused by the rule {rule}.")
    }
}

/// The rules in force, in the order they were given.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// Reads the three lists; the first bad rule is the error.
    pub fn parse(allow: &[String], ask: &[String], deny: &[String]) -> Result<Rules, RuleError> {
        let mut rules = Vec::new();
        for (list, texts) in [(List::Allow, allow), (List::Ask, ask), (List::Deny, deny)] {
            for text in texts {
                rules.push(Rule::parse(list, text)?);
            }
        }
        Ok(Rules { rules })
    }

    /// Every rule.
    pub fn all(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether any deny rule is about commands.
    fn denies_commands(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.list == List::Deny && matches!(r.pattern, Pattern::Command(_)))
    }

    fn first(&self, list: List, matches: impl Fn(&Rule) -> bool) -> Option<&Rule> {
        self.rules.iter().find(|r| r.list == list && matches(r))
    }

    /// The allow rules that allow `action` (one [`Rules::judge`] found [`Judgement::Allow`]), as
    /// written, for the chat's row: `run_bash(git status *)`, several joined with ", ".
    pub fn allowed_by(&self, action: &Action) -> String {
        let mut names: Vec<String> = Vec::new();
        let mut add = |rule: Option<&Rule>| {
            if let Some(rule) = rule {
                if !names.contains(&rule.text) {
                    names.push(rule.text.clone());
                }
            }
        };
        match action {
            Action::Edit { rel } => add(self.first(List::Allow, |r| r.matches_path(rel))),
            Action::Command { command } => {
                if let Split::Commands(commands) = shell::split(command) {
                    for command in &commands {
                        add(self.first(List::Allow, |r| r.matches_command(command)));
                    }
                }
            }
        }
        names.join(", ")
    }

    /// What the rules say about `action`.
    pub fn judge(&self, action: &Action) -> Judgement {
        match action {
            Action::Edit { rel } => {
                let matches = |r: &Rule| r.matches_path(rel);
                if let Some(rule) = self.first(List::Deny, matches) {
                    return Judgement::Deny {
                        rule: rule.to_string(),
                    };
                }
                if let Some(rule) = self.first(List::Ask, matches) {
                    return Judgement::Ask {
                        rule: rule.to_string(),
                    };
                }
                if self.first(List::Allow, matches).is_some() {
                    return Judgement::Allow;
                }
                Judgement::Undecided
            }
            Action::Command { command } => self.judge_command(command),
        }
    }

    fn judge_command(&self, line: &str) -> Judgement {
        let (commands, opaque) = match shell::split(line) {
            Split::Commands(commands) => (commands, None),
            Split::Opaque(why, seen) => (seen, Some(why)),
        };
        for command in &commands {
            if let Some(rule) = self.first(List::Deny, |r| r.matches_command(command)) {
                return Judgement::Deny {
                    rule: rule.to_string(),
                };
            }
        }
        if let Some(why) = opaque {
            return Judgement::Opaque { why };
        }
        for command in &commands {
            if let Some(rule) = self.first(List::Ask, |r| r.matches_command(command)) {
                return Judgement::Ask {
                    rule: rule.to_string(),
                };
            }
        }
        let allowed = !commands.is_empty()
            && commands.iter().all(|command| {
                !command.writes_file
                    && self
                        .first(List::Allow, |r| r.matches_command(command))
                        .is_some()
            });
        if allowed {
            return Judgement::Allow;
        }
        // Code from a file the line does not show: the deny rules cannot see into it.
        match commands.iter().find_map(|command| command.unseen) {
            Some(why) if self.denies_commands() => Judgement::Opaque { why },
            Some(_) | None => Judgement::Undecided,
        }
    }

    /// Whether a call judged `judgement` may go ahead under auto_approve with nobody asked: not
    /// a denied one, and not an opaque command line while deny rules for commands exist.
    pub fn auto_approvable(&self, judgement: &Judgement) -> bool {
        match judgement {
            Judgement::Deny { .. } => false,
            Judgement::Opaque { .. } => !self.denies_commands(),
            Judgement::Ask { .. } | Judgement::Allow | Judgement::Undecided => true,
        }
    }
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (spaces too) and
/// every other character only itself. A pattern ending in ` *` also matches the command without
/// arguments: `cargo test *` matches `cargo test`.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    if let Some(bare) = pattern.strip_suffix(" *") {
        if !bare.contains('*') && bare == text {
            return true;
        }
    }
    plain_wildcard(pattern, text)
}

/// The match on bytes: as on characters, since a literal byte of a UTF-8 pattern that starts a
/// character never matches one inside a character of the text.
fn plain_wildcard(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    // Most rules fail on what comes before their first `*`: no loop for them.
    let literal = p.iter().position(|b| *b == b'*').unwrap_or(p.len());
    if !t.starts_with(&p[..literal]) {
        return false;
    }
    if literal == p.len() {
        return t.len() == p.len();
    }
    let (mut pi, mut ti) = (literal, literal);
    // Where the last `*` was, and where in `text` it started matching.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((star_at, from)) = star {
            // Let the last `*` take one more character and try again after it.
            pi = star_at + 1;
            ti = from + 1;
            star = Some((star_at, from + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
