//! Tracing output only when `FINN_SANDBOX_LOG` asks for it (e.g. `FINN_SANDBOX_LOG=debug`).

#[napi_derive::module_init]
fn init_logging() {
  if let Ok(filter) = std::env::var("FINN_SANDBOX_LOG") {
    let _ = tracing_subscriber::fmt()
      .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
      .with_writer(std::io::stderr)
      .try_init();
  }
}
