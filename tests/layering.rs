//! The rooms of `src/core` import only the rooms below them (README "Architecture"), and only
//! `src/binding` touches napi. Read from the source text, so a new upward import fails here.

use std::path::Path;

/// Each room of `core` and the rooms of ours it may import.
const ALLOWED: &[(&str, &[&str])] = &[
  (
    "sandbox",
    &["sandbox", "policy", "audit", "pool", "limits", "isolate"],
  ),
  ("policy", &["policy"]),
  ("audit", &["audit"]),
  ("pool", &["pool", "supervisor", "exec", "limits", "isolate"]),
  ("supervisor", &["supervisor", "exec", "isolate"]),
  ("exec", &["exec"]),
  ("isolate", &["isolate"]),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
  for entry in std::fs::read_dir(dir).unwrap() {
    let path = entry.unwrap().path();
    if path.is_dir() {
      rust_files(&path, out);
    } else if path.extension().is_some_and(|e| e == "rs") {
      out.push(path);
    }
  }
}

#[test]
fn core_rooms_import_only_downwards_and_never_napi() {
  let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
  let mut violations = Vec::new();
  for (room, allowed) in ALLOWED {
    let mut files = Vec::new();
    rust_files(&core.join(room), &mut files);
    assert!(!files.is_empty(), "core/{room} has sources");
    for file in files {
      let text = std::fs::read_to_string(&file).unwrap();
      for (at, _) in text.match_indices("crate::core::") {
        let target: String = text[at + "crate::core::".len()..]
          .chars()
          .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
          .collect();
        if !allowed.contains(&target.as_str()) {
          violations.push(format!("{}: core::{target}", file.display()));
        }
      }
      for forbidden in ["napi", "crate::binding"] {
        if text.contains(&format!("use {forbidden}")) || text.contains(&format!("{forbidden}::")) {
          violations.push(format!("{}: {forbidden}", file.display()));
        }
      }
    }
  }
  assert!(
    violations.is_empty(),
    "upward or napi imports: {violations:#?}"
  );
}
