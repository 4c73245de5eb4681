//! The crate graph is the architecture (ARCHITECTURE.md, "The map"): each crate of the
//! workspace may depend only on the crates below it. This asks cargo for the workspace's
//! packages and their dependencies (`cargo metadata`, so a renamed or target-specific
//! dependency is seen by its real package name) and fails when one depends on a workspace crate
//! its layer may not know, when a crate is added without a place in [`LAYERS`], or when the
//! test fixtures reach what a `cargo build` builds.

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
/// The root package: the binary, above every crate.
const ROOT: &str = "agent-nvim";

/// One workspace package as cargo describes it: its manifest, its name, and the workspace
/// crates (`agent-nvim*`) it depends on, each with whether only its tests use it (a
/// `[dev-dependencies]` entry) and whether it is optional (built only with a feature).
struct Package {
    manifest: String,
    name: String,
    deps: Vec<Dep>,
}

struct Dep {
    name: String,
    dev: bool,
    optional: bool,
}

/// The workspace's packages, from `cargo metadata` (no resolution, nothing fetched).
fn packages() -> Vec<Package> {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| Package {
            manifest: package["manifest_path"].as_str().unwrap().to_string(),
            name: package["name"].as_str().unwrap().to_string(),
            deps: package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dep| dep["name"].as_str().unwrap().starts_with("agent-nvim"))
                .map(|dep| Dep {
                    name: dep["name"].as_str().unwrap().to_string(),
                    dev: dep["kind"].as_str() == Some("dev"),
                    optional: dep["optional"].as_bool().unwrap_or(false),
                })
                .collect(),
        })
        .collect()
}

/// What is wrong with the workspace: a crate depending above its layer, one the table does not
/// place, or the fixtures where a build would use them (the root may name them as an optional
/// dependency, which only its `test-support` feature turns on).
fn violations(packages: &[Package]) -> Vec<String> {
    let mut wrong = Vec::new();
    for Package {
        manifest,
        name,
        deps,
    } in packages
    {
        let allowed: Option<&[&str]> = if name == ROOT {
            None
        } else {
            let Some((_, allowed)) = LAYERS.iter().find(|(crate_name, _)| crate_name == name)
            else {
                wrong.push(format!("{manifest}: {name} has no place in LAYERS"));
                continue;
            };
            Some(allowed)
        };
        for dep in deps {
            if dep.name == FIXTURES {
                let optional_in_root = name == ROOT && dep.optional;
                if !dep.dev && !optional_in_root {
                    wrong.push(format!(
                        "{manifest}: {name} may use {FIXTURES} in its tests only"
                    ));
                }
            } else if dep.name == ROOT && name != ROOT {
                wrong.push(format!("{manifest}: {name} may not depend on {ROOT}"));
            } else if let Some(allowed) = allowed {
                if !allowed.contains(&dep.name.as_str()) {
                    wrong.push(format!("{manifest}: {name} may not depend on {}", dep.name));
                }
            }
        }
    }
    wrong.sort();
    wrong
}

#[test]
fn no_workspace_crate_depends_on_one_its_layer_may_not_know() {
    let packages = packages();
    // Every crate under crates/ and the root: a package cargo did not list is not checked.
    let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    for (name, _) in LAYERS {
        assert!(
            names.contains(name),
            "{name} is not in the workspace: {names:?}"
        );
    }
    assert!(names.contains(&ROOT), "{names:?}");
    assert_eq!(violations(&packages), Vec::<String>::new());
}

#[test]
fn the_check_names_an_upward_dependency_and_an_unplaced_crate() {
    let dep = |name: &str, dev: bool, optional: bool| Dep {
        name: name.to_string(),
        dev,
        optional,
    };
    let package = |manifest: &str, name: &str, deps: Vec<Dep>| Package {
        manifest: manifest.to_string(),
        name: name.to_string(),
        deps,
    };
    let packages = [
        // What `agent-nvim-core` renamed to `core` in crates/text's manifest comes to.
        package(
            "crates/text/Cargo.toml",
            "agent-nvim-text",
            vec![dep("agent-nvim-core", false, false)],
        ),
        package(
            "crates/new/Cargo.toml",
            "agent-nvim-new",
            vec![dep("agent-nvim-text", true, false)],
        ),
        package(
            "crates/core/Cargo.toml",
            "agent-nvim-core",
            vec![
                dep(FIXTURES, false, false),
                dep(FIXTURES, true, false),
                dep(ROOT, false, false),
            ],
        ),
        package(
            "Cargo.toml",
            ROOT,
            vec![
                dep("agent-nvim-engine", false, false),
                dep(FIXTURES, false, true),
                dep(FIXTURES, true, false),
            ],
        ),
    ];
    assert_eq!(
        violations(&packages),
        [
            "crates/core/Cargo.toml: agent-nvim-core may not depend on agent-nvim",
            "crates/core/Cargo.toml: agent-nvim-core may use agent-nvim-fixtures in its tests only",
            "crates/new/Cargo.toml: agent-nvim-new has no place in LAYERS",
            "crates/text/Cargo.toml: agent-nvim-text may not depend on agent-nvim-core",
        ]
    );
    // The root using the fixtures in what it builds, not behind its feature, is named too.
    let root = [package(
        "Cargo.toml",
        ROOT,
        vec![dep(FIXTURES, false, false)],
    )];
    assert_eq!(
        violations(&root),
        ["Cargo.toml: agent-nvim may use agent-nvim-fixtures in its tests only"]
    );
}
