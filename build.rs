fn main() {
  napi_build::setup();
  // Relative relocations packed as DT_RELR (glibc 2.36, the baseline of the prebuilt binaries):
  // the loader then reads a few KB instead of a 250 KB .rela.dyn at every load of the addon, and
  // those pages no longer stay in the RSS of every Node process that requires it.
  let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
    && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
  if linux_gnu {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
  }
}
