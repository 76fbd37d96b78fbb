//! Property tests for the job spec's decoders: the packed form `index.js` builds
//! (`packed_job`) and the validation every decoded job goes through (`JobSpec::new`). Same
//! corpora as `tests/policy_fuzz.rs`: `tests/spec_fuzz.proptest-regressions` (failure seeds)
//! and `tests/corpus/spec/*` (packed strings, one per file). CI runs PROPTEST_CASES (default
//! 2000); the long run is `PROPTEST_CASES=1000000 cargo test --release --test spec_fuzz`.

use std::path::Path;

use finn_sandbox::binding::spec::packed_job;
use finn_sandbox::core::limits::{MAX_BUFFER_LIMIT, MAX_TIMEOUT_MS};
use finn_sandbox::core::pool::{JobSpec, Lane, RawJob};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// The repository: cargo's at run time (a copied test binary is pointed at its copy, see
/// scripts/ci-unprivileged.sh), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
  std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
    || Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(),
    Into::into,
  )
}

fn config() -> ProptestConfig {
  let cases = std::env::var("PROPTEST_CASES")
    .ok()
    .and_then(|c| c.parse().ok())
    .unwrap_or(2000);
  ProptestConfig {
    cases,
    failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
      "proptest-regressions",
    ))),
    ..ProptestConfig::default()
  }
}

/// Strings from an alphabet that holds what matters to a spec: NUL, '=', '+', '/', non-ASCII.
fn field() -> impl Strategy<Value = String> {
  prop_oneof![
    "[a-zA-Z0-9/=+. \\x00é]{0,12}",
    Just(String::new()),
    any::<String>(),
  ]
}

fn count() -> impl Strategy<Value = Option<u64>> {
  prop_oneof![
    Just(None),
    Just(Some(0)),
    Just(Some(MAX_TIMEOUT_MS)),
    Just(Some(MAX_TIMEOUT_MS + 1)),
    Just(Some(MAX_BUFFER_LIMIT)),
    Just(Some(MAX_BUFFER_LIMIT + 1)),
    Just(Some(u64::MAX)),
    any::<u64>().prop_map(Some),
    (0u64..100_000).prop_map(Some),
  ]
}

fn raw_job() -> impl Strategy<Value = RawJob> {
  (
    (field(), prop::collection::vec(field(), 0..4), field()),
    prop::collection::vec((field(), field()), 0..4),
    (count(), count()),
    (prop::option::of(field()), prop::option::of(field())),
    prop::option::of(prop_oneof![Just(Lane::Interactive), Just(Lane::System)]),
  )
    .prop_map(
      |((binary_path, args, cwd), env, (timeout_ms, max_buffer), (session_id, jail_root), lane)| {
        RawJob {
          binary_path,
          args,
          cwd,
          env,
          timeout_ms,
          max_buffer,
          session_id,
          jail_root,
          lane,
          // Never packed: index.js sends a spec with isolation field by field.
          isolation: None,
        }
      },
    )
}

/// The packed form of `raw`, as `index.js`'s `pack` writes it.
fn pack(raw: &RawJob) -> String {
  let optional = |s: &Option<String>| s.as_ref().map_or(String::new(), |v| format!("+{v}"));
  let number = |n: Option<u64>| n.map_or(String::new(), |n| n.to_string());
  let lane = match raw.lane.unwrap_or(Lane::Interactive) {
    Lane::Interactive => "interactive",
    Lane::System => "system",
  };
  let mut fields = vec![
    "v1".to_owned(),
    lane.to_owned(),
    optional(&raw.jail_root),
    raw.binary_path.clone(),
    raw.cwd.clone(),
    number(raw.timeout_ms),
    number(raw.max_buffer),
    optional(&raw.session_id),
    raw.args.len().to_string(),
    raw.env.len().to_string(),
  ];
  fields.extend(raw.args.iter().cloned());
  for (k, v) in &raw.env {
    fields.push(k.clone());
    fields.push(v.clone());
  }
  fields.join("\0")
}

/// `raw` with every NUL taken out of its strings (a NUL inside a value is what the packed form
/// cannot carry; `index.js` sends such a spec field by field).
fn without_nul(mut raw: RawJob) -> RawJob {
  let clean = |s: &mut String| s.retain(|c| c != '\0');
  clean(&mut raw.binary_path);
  clean(&mut raw.cwd);
  raw.args.iter_mut().for_each(clean);
  for (k, v) in &mut raw.env {
    clean(k);
    clean(v);
  }
  raw.jail_root.iter_mut().for_each(clean);
  raw.session_id.iter_mut().for_each(clean);
  raw
}

/// What any decoded job must satisfy once validated, or how it must be refused.
fn check_validated(raw: RawJob) -> Result<(), TestCaseError> {
  let timeout = raw.timeout_ms;
  match JobSpec::new(raw) {
    Ok(job) => {
      prop_assert!((1..=MAX_TIMEOUT_MS).contains(&job.timeout_ms));
      prop_assert!(job.max_buffer as u64 <= MAX_BUFFER_LIMIT);
      prop_assert!(!job.binary_path.is_empty() && !job.cwd.is_empty());
      prop_assert!(!job.cwd.contains('\0') && !job.binary_path.contains('\0'));
      for entry in &job.env {
        let bytes = entry.as_bytes();
        let eq = bytes.iter().position(|&b| b == b'=');
        prop_assert!(matches!(eq, Some(i) if i > 0), "{entry:?}");
      }
      // Nothing is silently weakened: a given timeout is kept exactly.
      if let Some(t) = timeout {
        prop_assert_eq!(job.timeout_ms, t);
      }
    }
    Err(e) => {
      let message = e.to_string();
      prop_assert!(
        message.starts_with("spec.") || message.starts_with("jailRoot"),
        "the refusal names no field: {message}"
      );
    }
  }
  Ok(())
}

/// A packed string never panics the decoder, and whatever it decodes then validates cleanly.
fn check_packed(input: &str) -> Result<(), TestCaseError> {
  match packed_job(input) {
    Ok(raw) => check_validated(raw),
    Err(e) => {
      prop_assert!(e.to_string().contains("packed spec is malformed"), "{e}");
      Ok(())
    }
  }
}

#[test]
fn corpus_spec() {
  let dir = manifest_dir().join("tests/corpus/spec");
  let mut files: Vec<_> = std::fs::read_dir(&dir)
    .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    .map(|e| e.unwrap().path())
    .collect();
  files.sort();
  assert!(!files.is_empty(), "{}: empty corpus", dir.display());
  for file in files {
    let input = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
    if let Err(e) = check_packed(&input) {
      panic!("{}: {e}", file.display());
    }
  }
}

proptest! {
  #![proptest_config(config())]

  #[test]
  fn validation_never_panics_and_keeps_or_refuses_by_name(raw in raw_job()) {
    check_validated(raw)?;
  }

  #[test]
  fn the_packed_decoder_never_panics_on_arbitrary_strings(input in any::<String>()) {
    check_packed(&input)?;
  }

  #[test]
  fn the_packed_decoder_never_panics_on_near_miss_packings(raw in raw_job(), cut in 0usize..64, extra in field()) {
    let mut packed = pack(&raw);
    // Cut or extend it at a field boundary or inside one.
    let at = packed.char_indices().map(|(i, _)| i).nth(cut).unwrap_or(packed.len());
    packed.truncate(at);
    packed.push_str(&extra);
    check_packed(&packed)?;
  }

  #[test]
  fn a_packed_job_without_nul_in_its_values_round_trips(raw in raw_job().prop_map(without_nul)) {
    let decoded = packed_job(&pack(&raw)).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&decoded.binary_path, &raw.binary_path);
    prop_assert_eq!(&decoded.args, &raw.args);
    prop_assert_eq!(&decoded.cwd, &raw.cwd);
    prop_assert_eq!(&decoded.env, &raw.env);
    prop_assert_eq!(decoded.timeout_ms, raw.timeout_ms);
    prop_assert_eq!(decoded.max_buffer, raw.max_buffer);
    prop_assert_eq!(&decoded.session_id, &raw.session_id);
    prop_assert_eq!(&decoded.jail_root, &raw.jail_root);
    prop_assert_eq!(decoded.lane, Some(raw.lane.unwrap_or(Lane::Interactive)));
  }
}
