fn main() {
  napi_build::setup();
  // Relative relocations packed as DT_RELR: the loader then reads a few KB instead of a 250 KB
  // .rela.dyn at every load of the addon, and those pages no longer stay in the RSS of every
  // Node process that requires it. The binaries then need glibc 2.36 (GLIBC_ABI_DT_RELR), the
  // baseline of the prebuilt ones; a build from source on an older glibc (Ubuntu 22.04's 2.35
  // with binutils 2.38, say) would not load there, so it packs only when the glibc it builds
  // on (and for: not a cross build) has them.
  let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
    && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
  let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
  if linux_gnu && native && host_glibc_at_least(2, 36) {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
  }
}

/// Whether the glibc this build script runs on is at least `major.minor`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn host_glibc_at_least(major: u32, minor: u32) -> bool {
  unsafe extern "C" {
    fn gnu_get_libc_version() -> *const std::ffi::c_char;
  }
  // SAFETY: glibc returns a static NUL-terminated string.
  let version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
  let mut parts = version
    .to_str()
    .unwrap_or("")
    .split('.')
    .map(|p| p.parse::<u32>().unwrap_or(0));
  let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
  found >= (major, minor)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn host_glibc_at_least(_major: u32, _minor: u32) -> bool {
  false
}
