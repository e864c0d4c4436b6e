//! Finding the server binaries; a missing one is a test failure that says how to get it.

use std::path::{Path, PathBuf};

/// Where the Debian `nats-server` package installs the binary (`./scripts/test` installs it).
const NATS_SERVER_DEBIAN: &str = "/usr/sbin/nats-server";

/// The `semaq-server` binary in the running test's target directory; panics, saying how to build
/// it, when it is not there.
pub fn semaq_server_path() -> PathBuf {
    let test = std::env::current_exe().expect("the running test's path");
    let path = next_to_test_binary(&test, "semaq-server");
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build -p semaq-server` first (`cargo test --workspace`, as \
         ./scripts/test runs it, builds it before any test runs)",
        path.display()
    );
    path
}

/// The `nats-server` binary on `PATH` or at `/usr/sbin/nats-server`; panics, saying how to
/// install it, when there is none.
pub fn nats_server_path() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|dir| dir.join("nats-server")).find(|c| c.is_file()));
    let debian = Path::new(NATS_SERVER_DEBIAN);
    on_path.or_else(|| debian.is_file().then(|| debian.to_path_buf())).unwrap_or_else(|| {
        panic!(
            "nats-server is not installed (not on PATH, not at {NATS_SERVER_DEBIAN}): ./scripts/test installs \
             it, or run `sudo apt-get install nats-server`"
        )
    })
}

/// `name` in the target directory of the binary at `test`: test binaries are in `<profile>/deps/`,
/// binaries in `<profile>/`.
pub(crate) fn next_to_test_binary(test: &Path, name: &str) -> PathBuf {
    let mut dir = test.parent().expect("the test binary's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent().expect("the target profile directory");
    }
    dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_are_found_in_the_profile_directory_above_deps() {
        let found = next_to_test_binary(Path::new("/t/debug/deps/cli-0123abcd"), "semaq-server");
        assert_eq!(found, Path::new("/t/debug").join(format!("semaq-server{}", std::env::consts::EXE_SUFFIX)));
        let beside = next_to_test_binary(Path::new("/t/debug/semaq"), "semaq-server");
        assert_eq!(beside, Path::new("/t/debug").join(format!("semaq-server{}", std::env::consts::EXE_SUFFIX)));
    }
}
