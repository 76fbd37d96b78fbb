//! The pool's inline host (see `crates/finn-pool/src/inline.rs`) on Node's event loop.
//!
//! One epoll set per pool holds the sockets of the reapers its inline jobs wait on, and a
//! timerfd for the window; a single `uv_poll` handle watches that set from Node's loop. The
//! libuv functions come from the running process with `dlsym` (Node exports them): where they
//! are missing, the pool simply runs every job on its worker threads.
//!
//! The handle is unref'd (it never holds the loop open: `index.js` does while jobs are
//! pending), closed when the pool is collected, and closed through an async cleanup hook when
//! the environment goes first (a worker thread's exit), so libuv never sees an open handle at
//! its loop's close. A job still watched then is handed to a worker thread.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use napi::{Env, sys};

use finn_pool::{INLINE_WINDOW, InlineHost, InlineJob};

type PollCb = unsafe extern "C" fn(*mut c_void, c_int, c_int);
type CloseCb = unsafe extern "C" fn(*mut c_void);
type HandleSizeFn = unsafe extern "C" fn(c_int) -> usize;
type PollInitFn = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int) -> c_int;
type PollStartFn = unsafe extern "C" fn(*mut c_void, c_int, PollCb) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void, CloseCb);
type UnrefFn = unsafe extern "C" fn(*mut c_void);

/// The libuv entry points used here.
struct Uv {
  handle_size: HandleSizeFn,
  poll_init: PollInitFn,
  poll_start: PollStartFn,
  close: CloseFn,
  unref: UnrefFn,
}

/// `UV_POLL` in `uv_handle_type`, and `UV_READABLE`: stable across libuv 1.x.
const UV_POLL: c_int = 8;
const UV_READABLE: c_int = 1;
/// The epoll data of the timerfd (a socket's is its fd).
const TIMER: u64 = u64::MAX;

fn uv() -> Option<&'static Uv> {
  static UV: OnceLock<Option<Uv>> = OnceLock::new();
  UV.get_or_init(|| {
    fn sym(name: &CStr) -> Option<*mut c_void> {
      // SAFETY: looks a symbol up in the process's global scope; `name` is NUL-terminated.
      let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
      (!p.is_null()).then_some(p)
    }
    // SAFETY: each symbol, when present, is the libuv function of that name, with the
    // signature declared in `Uv` (libuv 1.x's uv.h).
    unsafe {
      Some(Uv {
        handle_size: std::mem::transmute::<*mut c_void, HandleSizeFn>(sym(c"uv_handle_size")?),
        poll_init: std::mem::transmute::<*mut c_void, PollInitFn>(sym(c"uv_poll_init")?),
        poll_start: std::mem::transmute::<*mut c_void, PollStartFn>(sym(c"uv_poll_start")?),
        close: std::mem::transmute::<*mut c_void, CloseFn>(sym(c"uv_close")?),
        unref: std::mem::transmute::<*mut c_void, UnrefFn>(sym(c"uv_unref")?),
      })
    }
  })
  .as_ref()
}

/// A pool's inline host: `None` from [`LoopHost::new`] where it cannot be set up.
pub(crate) struct LoopHost {
  shared: Rc<Shared>,
}

struct Shared {
  epoll: OwnedFd,
  timer: OwnedFd,
  timer_armed: Cell<bool>,
  /// The watched jobs, by their reaper's socket.
  jobs: RefCell<HashMap<RawFd, InlineJob>>,
  /// The uv_poll handle; null once closed.
  handle: Cell<*mut c_void>,
  /// The async cleanup hook; null once removed.
  hook: Cell<sys::napi_async_cleanup_hook_handle>,
  /// The hook ran (the environment is going): remove it once the handle is closed.
  hook_ran: Cell<bool>,
}

impl LoopHost {
  pub(crate) fn new(env: &Env) -> Option<LoopHost> {
    let uv = uv()?;
    // SAFETY: plain syscalls; on success the descriptors are ours.
    let (epoll, timer) = unsafe {
      let e = libc::epoll_create1(libc::EPOLL_CLOEXEC);
      if e < 0 {
        return None;
      }
      let epoll = OwnedFd::from_raw_fd(e);
      let t = libc::timerfd_create(
        libc::CLOCK_MONOTONIC,
        libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
      );
      if t < 0 {
        return None;
      }
      (epoll, OwnedFd::from_raw_fd(t))
    };
    if !epoll_ctl(&epoll, libc::EPOLL_CTL_ADD, timer.as_raw_fd(), TIMER) {
      return None;
    }
    let uv_loop = env.get_uv_event_loop().ok()?;
    let shared = Rc::new(Shared {
      epoll,
      timer,
      timer_armed: Cell::new(false),
      jobs: RefCell::new(HashMap::new()),
      handle: Cell::new(std::ptr::null_mut()),
      hook: Cell::new(std::ptr::null_mut()),
      hook_ran: Cell::new(false),
    });
    // SAFETY: the handle is zeroed memory of the size libuv asks for, initialised by
    // `uv_poll_init` on this thread's loop; its `data` (the first field of every handle) holds
    // one reference on `shared`, given back in `on_closed`.
    unsafe {
      let handle = libc::calloc(1, (uv.handle_size)(UV_POLL));
      if handle.is_null() {
        return None;
      }
      if (uv.poll_init)(uv_loop.cast(), handle, shared.epoll.as_raw_fd()) != 0 {
        libc::free(handle);
        return None;
      }
      *handle.cast::<*const Shared>() = Rc::into_raw(Rc::clone(&shared));
      shared.handle.set(handle);
      if (uv.poll_start)(handle, UV_READABLE, on_ready) != 0 {
        close(&shared);
        return None;
      }
      (uv.unref)(handle);
      let arg = Rc::into_raw(Rc::clone(&shared)) as *mut c_void;
      let mut hook = std::ptr::null_mut();
      if sys::napi_add_async_cleanup_hook(env.raw(), Some(on_env_cleanup), arg, &mut hook)
        != sys::Status::napi_ok
      {
        drop(Rc::from_raw(arg as *const Shared));
        close(&shared);
        return None;
      }
      shared.hook.set(hook);
    }
    Some(LoopHost { shared })
  }

  pub(crate) fn host(&self) -> &dyn InlineHost {
    &*self.shared
  }
}

impl Drop for LoopHost {
  fn drop(&mut self) {
    let hook = self.shared.hook.replace(std::ptr::null_mut());
    if !hook.is_null() && !self.shared.hook_ran.get() {
      // SAFETY: the hook was added by `new` and has not run; its argument holds a reference
      // on `shared`, given back here.
      unsafe {
        sys::napi_remove_async_cleanup_hook(hook);
        drop(Rc::from_raw(Rc::as_ptr(&self.shared)));
      }
    } else {
      self.shared.hook.set(hook);
    }
    close(&self.shared);
  }
}

impl InlineHost for Shared {
  fn watch(&self, job: InlineJob) {
    if self.handle.get().is_null()
      || !epoll_ctl(&self.epoll, libc::EPOLL_CTL_ADD, job.fd(), job.fd() as u64)
    {
      job.hand_off();
      return;
    }
    if !self.timer_armed.get() {
      self.arm(INLINE_WINDOW.saturating_sub(job.since().elapsed()));
    }
    self.jobs.borrow_mut().insert(job.fd(), job);
  }
}

impl Shared {
  fn arm(&self, after: Duration) {
    // At least 1 us: a zero `it_value` would disarm the timer.
    let after = after.max(Duration::from_micros(1));
    let spec = libc::itimerspec {
      it_interval: libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
      },
      it_value: libc::timespec {
        tv_sec: after.as_secs() as libc::time_t,
        tv_nsec: after.subsec_nanos() as libc::c_long,
      },
    };
    // SAFETY: a valid itimerspec for our own timerfd.
    let armed =
      unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) == 0 };
    self.timer_armed.set(armed);
  }

  /// Takes a job out of the set.
  fn unwatch(&self, fd: RawFd) -> Option<InlineJob> {
    let job = self.jobs.borrow_mut().remove(&fd)?;
    epoll_ctl(&self.epoll, libc::EPOLL_CTL_DEL, fd, 0);
    Some(job)
  }

  /// The set is readable: steps each job whose reaper answered, hands off each whose window
  /// passed.
  fn ready(&self) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
    // SAFETY: `events` is a valid array of its length; zero timeout.
    let n = unsafe {
      libc::epoll_wait(
        self.epoll.as_raw_fd(),
        events.as_mut_ptr(),
        events.len() as c_int,
        0,
      )
    };
    for event in events.iter().take(n.max(0) as usize) {
      let data = event.u64;
      if data == TIMER {
        self.expire();
      } else if let Some(job) = self.unwatch(data as RawFd) {
        job.step();
      }
    }
  }

  /// The timer fired: hands off every job past its window, and re-arms for the oldest left.
  fn expire(&self) {
    let mut expirations = 0u64;
    // SAFETY: reads 8 bytes into a u64 from our own non-blocking timerfd.
    unsafe {
      libc::read(
        self.timer.as_raw_fd(),
        (&mut expirations as *mut u64).cast(),
        8,
      )
    };
    self.timer_armed.set(false);
    let now = Instant::now();
    let late: Vec<RawFd> = self
      .jobs
      .borrow()
      .iter()
      .filter(|(_, j)| now.duration_since(j.since()) >= INLINE_WINDOW)
      .map(|(fd, _)| *fd)
      .collect();
    for fd in late {
      if let Some(job) = self.unwatch(fd) {
        job.hand_off();
      }
    }
    let oldest = self.jobs.borrow().values().map(InlineJob::since).min();
    if let Some(since) = oldest {
      self.arm(INLINE_WINDOW.saturating_sub(since.elapsed()));
    }
  }
}

fn epoll_ctl(epoll: &OwnedFd, op: c_int, fd: RawFd, data: u64) -> bool {
  let mut event = libc::epoll_event {
    events: libc::EPOLLIN as u32,
    u64: data,
  };
  // SAFETY: a valid epoll_event for our own epoll set.
  unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut event) == 0 }
}

/// Closes the handle (once); every job still watched goes to a worker thread.
fn close(shared: &Shared) {
  let handle = shared.handle.replace(std::ptr::null_mut());
  if handle.is_null() {
    return;
  }
  let fds: Vec<RawFd> = shared.jobs.borrow().keys().copied().collect();
  for fd in fds {
    if let Some(job) = shared.unwatch(fd) {
      job.hand_off();
    }
  }
  if let Some(uv) = uv() {
    // SAFETY: an initialised, not yet closed handle of this thread's loop.
    unsafe { (uv.close)(handle, on_closed) };
  }
}

unsafe extern "C" fn on_ready(handle: *mut c_void, _status: c_int, _events: c_int) {
  // SAFETY: `data` holds a reference on `Shared` until `on_closed`, which cannot run while
  // this callback does.
  let shared = unsafe { &**handle.cast::<*const Shared>() };
  // A panic must not unwind into libuv; the job it was in hands itself off when dropped.
  let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.ready()));
}

unsafe extern "C" fn on_closed(handle: *mut c_void) {
  // SAFETY: the reference taken in `LoopHost::new`, given back once; the handle memory came
  // from `calloc` and libuv is done with it.
  unsafe {
    let shared = Rc::from_raw(*handle.cast::<*const Shared>());
    libc::free(handle);
    if shared.hook_ran.get() {
      let hook = shared.hook.replace(std::ptr::null_mut());
      if !hook.is_null() {
        sys::napi_remove_async_cleanup_hook(hook);
      }
    }
  }
}

unsafe extern "C" fn on_env_cleanup(_hook: sys::napi_async_cleanup_hook_handle, arg: *mut c_void) {
  // SAFETY: the reference given to the hook in `LoopHost::new`, taken back once.
  let shared = unsafe { Rc::from_raw(arg as *const Shared) };
  shared.hook_ran.set(true);
  if shared.handle.get().is_null() {
    // Already closed (its close callback removes the hook only after this ran): remove now.
    let hook = shared.hook.replace(std::ptr::null_mut());
    if !hook.is_null() {
      // SAFETY: the hook added in `new`, removed once.
      unsafe { sys::napi_remove_async_cleanup_hook(hook) };
    }
    return;
  }
  close(&shared);
}
