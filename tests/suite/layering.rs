//! The crate graph is the architecture (ARCHITECTURE.md, "The map"): each crate of the
//! workspace may depend only on the crates below it. This reads every `crates/*/Cargo.toml` and
//! fails when one names a workspace crate its layer may not know, or when a crate is added
//! without a place in [`LAYERS`].

use std::collections::BTreeMap;
use std::path::Path;

/// Each workspace crate (the root package aside, which is the top and may use any) and the
/// workspace crates it may depend on. The test fixtures ([`FIXTURES`]) are not in it: any crate
/// may use them in its tests, and none in what it builds.
const LAYERS: &[(&str, &[&str])] = &[
    ("agent-nvim-text", &[]),
    ("agent-nvim-vocab", &[]),
    ("agent-nvim-fixtures", &[]),
    ("agent-nvim-core", &["agent-nvim-text", "agent-nvim-vocab"]),
    ("agent-nvim-llm", &["agent-nvim-text", "agent-nvim-vocab"]),
    (
        "agent-nvim-conversation",
        &[
            "agent-nvim-core",
            "agent-nvim-llm",
            "agent-nvim-text",
            "agent-nvim-vocab",
        ],
    ),
    (
        "agent-nvim-acp",
        &[
            "agent-nvim-conversation",
            "agent-nvim-core",
            "agent-nvim-text",
            "agent-nvim-vocab",
        ],
    ),
    (
        "agent-nvim-engine",
        &[
            "agent-nvim-conversation",
            "agent-nvim-core",
            "agent-nvim-llm",
            "agent-nvim-text",
            "agent-nvim-vocab",
        ],
    ),
];

/// The dev-only crate of test fixtures: a `[dev-dependencies]` entry only.
const FIXTURES: &str = "agent-nvim-fixtures";

/// The package name and the workspace crates (`agent-nvim*`) a manifest depends on, in any of
/// its dependency tables (normal, dev, build, target-specific), each with whether the table is
/// `[dev-dependencies]`.
fn workspace_deps(manifest: &str) -> (String, Vec<(String, bool)>) {
    let mut name = String::new();
    let mut deps = Vec::new();
    let mut section = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"');
        if section == "package" && key == "name" {
            name = value.trim().trim_matches('"').to_string();
        } else if section.ends_with("dependencies") && key.starts_with("agent-nvim") {
            deps.push((key.to_string(), section.ends_with("dev-dependencies")));
        } else if section.contains("dependencies.agent-nvim") {
            // `[dependencies.agent-nvim-core]` written as a table of its own.
            let dep = section.rsplit('.').next().unwrap_or_default().to_string();
            let dev = section.contains("dev-dependencies.");
            if !deps.contains(&(dep.clone(), dev)) {
                deps.push((dep, dev));
            }
        }
    }
    (name, deps)
}

/// What is wrong with the workspace's manifests: a crate depending above its layer, or one the
/// table does not place.
fn violations(manifests: &BTreeMap<String, String>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (path, text) in manifests {
        let (name, deps) = workspace_deps(text);
        let Some((_, allowed)) = LAYERS.iter().find(|(crate_name, _)| *crate_name == name) else {
            wrong.push(format!("{path}: {name} has no place in LAYERS"));
            continue;
        };
        for (dep, dev) in deps {
            if dep == FIXTURES {
                if !dev {
                    wrong.push(format!("{path}: {name} may use {dep} in its tests only"));
                }
            } else if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{path}: {name} may not depend on {dep}"));
            }
        }
    }
    wrong
}

#[test]
fn no_workspace_crate_depends_on_one_its_layer_may_not_know() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut manifests = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        if manifest.exists() {
            let text = std::fs::read_to_string(&manifest).unwrap();
            manifests.insert(manifest.display().to_string(), text);
        }
    }
    assert!(!manifests.is_empty(), "no crates under {}", root.display());
    assert_eq!(violations(&manifests), Vec::<String>::new());
}

#[test]
fn the_check_names_an_upward_dependency_and_an_unplaced_crate() {
    let manifests = BTreeMap::from([
        (
            "crates/text/Cargo.toml".to_string(),
            "[package]\nname = \"agent-nvim-text\"\n\n[dependencies]\nmemchr = \"2\"\n\
             agent-nvim-core = { path = \"../core\" }\n"
                .to_string(),
        ),
        (
            "crates/new/Cargo.toml".to_string(),
            "[package]\nname = \"agent-nvim-new\"\n\n[dev-dependencies.agent-nvim-text]\npath = \"../text\"\n"
                .to_string(),
        ),
        (
            "crates/core/Cargo.toml".to_string(),
            "[package]\nname = \"agent-nvim-core\"\n\n[dependencies]\n\
             agent-nvim-fixtures = { path = \"../fixtures\" }\n\n[dev-dependencies]\n\
             agent-nvim-fixtures = { path = \"../fixtures\" }\n"
                .to_string(),
        ),
    ]);
    assert_eq!(
        violations(&manifests),
        [
            "crates/core/Cargo.toml: agent-nvim-core may use agent-nvim-fixtures in its tests only",
            "crates/new/Cargo.toml: agent-nvim-new has no place in LAYERS",
            "crates/text/Cargo.toml: agent-nvim-text may not depend on agent-nvim-core",
        ]
    );
}
