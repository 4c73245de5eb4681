//! The one write token: [`Approved`]. It sits at the bottom of the core, beneath everything that
//! takes it, and names none of the modules that mint it.

/// Proof that a change to the disk or a started process was allowed. Every function that changes
/// the disk or starts a command takes one (the workspace's write primitives,
/// [`crate::process::spawn_tree`] and [`crate::process::run`]). Neither `Clone` nor `Copy`: one
/// allow, one step.
///
/// Only the core mints one, in three places, which a test of this module holds to: the executor
/// after the gate's allow ([`crate::tools::Executor`], moved into the plan's step), the
/// checkpoints for their own git and a person's rewind ([`crate::checkpoint`]), and what the core
/// does for an external agent the person started ([`crate::external`]). No crate above the core
/// can make one. The type can be named:
///
/// ```
/// fn effect(_approved: &agent_nvim_core::tools::Approved) {}
/// ```
///
/// but not built, neither directly nor through the core's constructors:
///
/// ```compile_fail,E0603
/// let token = agent_nvim_core::tools::Approved(());
/// ```
///
/// ```compile_fail,E0624
/// let token = agent_nvim_core::tools::Approved::by_gate();
/// ```
///
/// ```compile_fail,E0599
/// let token = agent_nvim_core::tools::Approved::for_tests();
/// ```
#[derive(Debug)]
pub struct Approved(());

impl Approved {
    /// The token for a step the gate allowed; the executor's alone.
    pub(crate) fn by_gate() -> Self {
        Approved(())
    }

    /// The token for the checkpoints' own work: git on the shadow repository, and the files a
    /// person's rewind puts back.
    pub(crate) fn for_checkpoints() -> Self {
        Approved(())
    }

    /// The token for what the core does for an external agent (its file writes, its own
    /// process, its terminals), which that agent's own permission flow governs, not our gate.
    pub(crate) fn for_external_agent() -> Self {
        Approved(())
    }

    /// A token for tests that call an effect function directly; never compiled into the product.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Approved(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    /// Each file of the core's source, relative to `src/`, with its text.
    fn sources(dir: &Path, base: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, base, found);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let rel = path.strip_prefix(base).unwrap().display().to_string();
                found.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }

    /// The text before a file's inline tests (`mod tests {` onwards is left out; a tests file
    /// is left out whole).
    fn product(rel: &str, text: &str) -> String {
        if rel.ends_with("tests.rs") {
            return String::new();
        }
        text.split("mod tests {")
            .next()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn only_the_executor_the_checkpoints_and_external_mint_the_token() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        sources(&base, &base, &mut found);
        let mut minting: Vec<(String, &str)> = Vec::new();
        for (rel, text) in &found {
            let product = product(rel, text);
            for mint in ["by_gate()", "for_checkpoints()", "for_external_agent()"] {
                if rel != "approved.rs" && product.contains(&format!("Approved::{mint}")) {
                    minting.push((rel.clone(), mint));
                }
            }
        }
        minting.sort();
        assert_eq!(
            minting,
            [
                ("checkpoint/mod.rs".to_string(), "for_checkpoints()"),
                ("external.rs".to_string(), "for_external_agent()"),
                ("tools/executor.rs".to_string(), "by_gate()"),
            ]
        );
    }
}
