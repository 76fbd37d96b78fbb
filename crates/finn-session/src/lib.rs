//! A session's long-lived bash: the protocol by which it runs one command at a time, and the
//! restore of its state when it dies. May use `finn-exec` (pidfds, `ppoll`, the lifecycle
//! machine), `finn-supervisor` (the reaper that holds the shell) with `finn-isolate`'s plan, and
//! `finn-job`; nothing else of ours. The addon (`src/binding/session.rs`) runs one [`Session`]
//! per JS session, with [`Host::Reaper`] (see "Under a reaper" below).
//!
//! - [`protocol`]: the bytes, with no process: the bootstrap, the request line for one command,
//!   the completion record and its reader, the restore script built from a snapshot.
//! - [`code`]: [`SessionErrorCode`], the codes JS's `SessionError` carries.
//! - [`shell`]: a blocking driver ([`Session`]) that spawns bash, runs commands over the
//!   protocol with `ppoll`, and replaces a dead shell; the cargo tests run it against real bash.
//!
//! # The protocol
//!
//! bash is started as `bash --noprofile --norc /dev/fd/3` with three descriptors of ours:
//!
//! | fd | direction | carries |
//! | --- | --- | --- |
//! | 3, the script | driver → bash | the bootstrap, then one request line per command: fixed code and decimal numbers only |
//! | 4, the data | driver → bash | the fifo directory's path and the start directory, then each command's text, as bytes `read -r -N <len>` stores in a variable |
//! | 5, the done fd | bash → driver | one record per command: `"<seq> <status>\n"`, then six NUL-terminated sections (the snapshot) |
//!
//! bash reads its script from fd 3 as from a script file (its own copy at fd 255,
//! close-on-exec); the bootstrap moves 4 and 5 to descriptors bash picks itself (`{var}<&4`,
//! so never a number the user has open), closes every other descriptor it inherited, and
//! defines two functions. A request is
//!
//! ```text
//! __finn_sess_pre <len> && builtin eval -- "$__finn_sess_cmd" </dev/null >"$dir/o.<seq>" 2>"$dir/e.<seq>" {data}<&- {done}>&-; __finn_sess_post "$?" <seq>
//! ```
//!
//! - **The command's text is data.** `pre` reads exactly `<len>` bytes into a variable and
//!   `eval` runs it at the top level (not inside a function: `return`, `local`, `declare` and
//!   `FUNCNAME` behave as in a script). An unterminated quote or a syntax error is an error of
//!   that `eval` (status 2, bash's message on the command's stderr); the shell then reads its next
//!   script line, so nothing the user writes can wedge the reader or become session code. A NUL
//!   byte, which a bash string cannot hold, is refused before anything is sent. A multi-line
//!   text runs line by line as a script would: lines before a syntax error have run.
//! - **Per-command pipes.** Each command gets fresh fifos for stdout and stderr (and stdin when
//!   given: otherwise `/dev/null`, EOF at once) in a directory private to the session (0700,
//!   removed with it). Fifos, because bash cannot receive descriptors: they are pipes that
//!   bash opens by name, and hold no data on disk. The driver opens its ends first, so bash's
//!   opens never wait, reads them as the command writes (no labelling, no prefixes), and keeps
//!   every byte: trailing newlines, NUL, invalid UTF-8, a 1 MiB line.
//! - **Completion on the done fd**, never from stdout and never polled: `post` writes the
//!   record after the command, and the driver sleeps in `ppoll` on the done fd, the fifos and
//!   the shell's pidfd. Every write of the command's foreground processes precedes the record,
//!   so once the record is read the fifos are drained of what is already there and the command
//!   is over; a background child (`cmd &`) that still holds a fifo does not keep it open, and
//!   what it writes afterwards is not part of any result (a write to the closed fifo fails).
//!   An `echo` round trip takes about 0.25 ms (debug build, `an_echo_round_trip_is_timed`).
//! - **The session's descriptors are closed for each command** (`{data}<&- {done}>&-`); bash
//!   keeps its own copies close-on-exec and restores them after the `eval`, so no command, and
//!   nothing it starts, inherits them.
//!
//! # The user's names are left alone
//!
//! Everything the session defines starts with `__finn_sess_` ([`protocol::PREFIX`]): the
//! variables `__finn_sess_{data,done,dir,flags,cmd}` (`cmd` exists only while a command runs)
//! and the functions `__finn_sess_{pre,post}`. A user's name collides only by choosing that
//! prefix. The session sets no trap and no alias. Its code calls builtins through `builtin`,
//! so user functions named `read`, `printf`, `set` or `eval` do not change it (a function named
//! `builtin` would). The user's `set` flags are theirs: `post` saves `$-` right after the
//! command and turns off `-a -e -u -v -x -E -T` for the session's own code (so `set -a` never
//! exports the session's variables and `set -u` never stops it), and `pre` puts them back
//! before the next command.
//!
//! # When the shell dies
//!
//! `exit 3` ends the shell with status 3; `exec prog` replaces it (the done fd closes, the
//! program's status is the command's); `set -e` and a failure end it; so do a special
//! builtin's error in posix mode, a signal, or anything that closes its script. The driver
//! sees the shell's pidfd readable before a record, reads its status without reaping it (the
//! status is the command's: [`CommandStatus::Exited`] or [`CommandStatus::Signaled`]), kills
//! what is left of its group and session, reaps it, starts a fresh bash, and runs the restore
//! as its first command; the result says `session_restarted: true`. A local shell's command
//! past its timeout gets the same (under a reaper only the command's tree dies: see "Under a
//! reaper"): SIGKILL for the shell's process group and session (the shell is started with
//! `setsid`, so jobs under `set -m`, in groups of their own, are found by session even once the
//! shell is gone), then a fresh, restored shell.
//!
//! After every command the record carries a snapshot of the shell as bash prints it (`set +o`,
//! `shopt -p`, `umask -p`, `declare -p`, `declare -f`, `declare -F`, `alias -p`), so the last
//! one is always from a live shell after its last completed command. The restore
//! ([`protocol::restore_script`]) brings back:
//!
//! | restored | how |
//! | --- | --- |
//! | shell variables, arrays, attributes (`-i -a -A -r -n -x`) | `declare -p` entries, except those bash maintains itself (`PPID`, `RANDOM`, `BASH_*`, `SHLVL`, ...: [`protocol`]'s list) and the session's own |
//! | the exported environment | the `-x` entries; the fresh shell starts with an empty environment, so a variable the user unset stays unset |
//! | functions, and their export | `declare -f`, then `declare -fx name` |
//! | aliases (`expand_aliases` on) | `alias -p` |
//! | `shopt` options, the umask | `shopt -p` (not `login_shell`, `restricted_shell`), `umask -p` |
//! | the working directory | `cd "$PWD"` (a logical path stays logical); if it is gone, the configured start directory |
//! | `set` options (`-e`, `-u`, `pipefail`, `posix`, ...) | `set +o`, applied last so `-e` cannot stop the restore; never `noexec` |
//!
//! Not restored: **traps** (a trap's text may name state that died with the shell, and an EXIT
//! trap has already run: set them again), **background jobs** (they belonged to the dead shell;
//! the driver kills them with its group and session), the directory stack, `$!`, `$?`, `$_`,
//! history, the command hash table, resource limits, open descriptors the user made (`exec
//! 3>file`) and `$0` (`/dev/fd/3`). A restore that itself ends the shell is dropped, and the
//! shell starts from the configuration.
//!
//! Known limits, each ended by the command's timeout (and then a restore from the snapshot
//! taken before it; without a timeout the driver waits): `set -n` stops the shell from running anything, the session's code
//! included; a DEBUG trap that skips commands (`extdebug`) can skip the session's; a command
//! that closes descriptors by number can close the session's saved copies, and one that reads
//! the shell's script descriptor (255) can eat the session's next request. Traps set by the
//! user (DEBUG, RETURN with `-T`) also run around the session's own code, with its output
//! going nowhere.
//!
//! # Under a reaper
//!
//! With [`Host::Reaper`] the shell is the leader of a job of one of the pool's supervisor's
//! reapers (`finn_supervisor::shell_job`), started as a normal `Run` with the session's
//! isolation plan (the fifo directory among its writable roots). Its three pipes are then fifos
//! in the session's directory (`script`, `data`, `done`), which the driver holds open read-write
//! so that neither side's open waits, and whose names are removed once the shell has them open
//! (another process of the user could otherwise write into them); a `bash -c` trampoline opens them at fds 3 to 5 and execs
//! the shell in place, so the reaper's leader is the shell itself. The reaper's socket takes the
//! place of the pidfd: it reports the shell's exit, and its end means the reaper is gone.
//!
//! Each command is the `Busy` phase of the shell's job in `finn_exec::lifecycle` (the watcher's
//! side): writing the request is `CommandSent`, output is `CommandOutput` (the idle deadline),
//! the record is `CommandEnded`, a stop is `StopCommand`, and the shell's exit is
//! `LeaderExited`. At the command's deadline, idle deadline or stop the machine asks for
//! `EndCommand`: the reaper SIGKILLs every process of its tree but the shell (its frozen tree
//! walk: double forks and `setsid` escapees included) until none is left and answers
//! `CommandEnded`; the shell writes the command's record (status 137) and keeps its state. The
//! driver ends the command only with both: the shell reports its foreground child's death
//! before the other processes killed with it are gone. A command that is the shell's own loop, or keeps forking,
//! does not end by that; past `COMMAND_END_BOUND` the machine terminates the whole job and the
//! driver restores a fresh shell. A local shell ([`Host::Local`], the protocol's tests) ends a
//! command past its time by killing the shell's group and session and restoring.
//!
//! # A command that runs on
//!
//! With [`RunOptions::yield_after`], or [`RunOptions::background`] when the command's deadline
//! or idle deadline comes (the machine's `Action::Background`), the caller is answered while
//! the command runs: the result is [`CommandStatus::Running`] and the command, with its shell,
//! its fifos and the record reader, becomes a [`Detached`] ([`Session::take_detached`]). The
//! same loop (`drive`) reads its fifos before and after, so every byte goes to exactly one of
//! the two sinks. [`Detached::follow`] runs it to its record or its shell's end, under the
//! deadlines it was sent with (a cut then ends the whole job, which is the command's alone), and
//! takes [`Control`] messages (a kill with a grace, a signal); at the end it ends the whole job,
//! so nothing the command left running survives it. The session's next shell is started
//! ([`Session::ready`], or the next command) and restored from the snapshot taken before the
//! command, so the session goes on from its state before it.

pub mod code;
pub mod protocol;
pub mod shell;

pub use code::SessionErrorCode;
pub use shell::{
  CommandResult, CommandStatus, Control, Cut, Detached, DetachedEnd, Host, RunOptions, Session,
  SessionConfig, SessionError, Stream,
};
