//! An accepted path, and whatever of it exists, lies inside the jail (the fixture of
//! tests/policy_fuzz.rs: symlinks out, up and back in).
#![no_main]

use std::os::unix::fs::symlink;
use std::sync::LazyLock;

use finn_sandbox::core::policy::FilesystemJail;
use libfuzzer_sys::fuzz_target;

static FIXTURE: LazyLock<(tempfile::TempDir, FilesystemJail)> = LazyLock::new(|| {
  let dir = tempfile::tempdir().unwrap();
  let jail = FilesystemJail::new(dir.path().to_str().unwrap()).unwrap();
  let root = jail.root().to_path_buf();
  std::fs::create_dir_all(root.join("dir/sub")).unwrap();
  std::fs::write(root.join("file"), "x").unwrap();
  std::fs::write(root.join("dir/file"), "x").unwrap();
  symlink("/etc", root.join("out")).unwrap();
  symlink(root.join("dir"), root.join("in")).unwrap();
  symlink("../../..", root.join("dir/up")).unwrap();
  (dir, jail)
});

fuzz_target!(|data: &[u8]| {
  let input = String::from_utf8_lossy(data);
  let jail = &FIXTURE.1;
  if let Ok(path) = jail.validate_path(&input) {
    assert!(path.starts_with(jail.root()), "{input:?} -> {path:?}");
    if let Ok(real) = std::fs::canonicalize(&path) {
      assert!(real.starts_with(jail.root()), "{input:?} -> {real:?}");
    }
  }
});
