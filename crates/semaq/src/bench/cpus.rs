//! Separate CPUs for a server a bench starts and for the bench's own clients.
//!
//! On a small machine the two otherwise preempt each other, and a latency tail then measures
//! how the scheduler interleaves two busy processes more than the work either does: `bench
//! intent-rr` on 2 cores gave the same queue group a p99 of 660 µs with both processes on both
//! cores, and 250 µs with one core each. Load generators and servers get machines (or cores) of
//! their own in any serious benchmark; this is that, on one machine.

use std::fmt;
use std::io;

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The CPUs this process may use, in two halves: the server's (the first) and the clients'.
#[derive(Clone, PartialEq, Eq)]
pub struct CpuSplit {
    server: Vec<usize>,
    clients: Vec<usize>,
}

impl CpuSplit {
    /// Splits the CPUs the calling thread may run on; `None` with fewer than two.
    pub fn of_this_thread() -> Option<Self> {
        let allowed = sched_getaffinity(None).ok()?;
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&cpu| allowed.is_set(cpu)).collect();
        Self::halves(&cpus)
    }

    fn halves(cpus: &[usize]) -> Option<Self> {
        if cpus.len() < 2 {
            return None;
        }
        let (server, clients) = cpus.split_at(cpus.len() / 2);
        Some(Self { server: server.to_vec(), clients: clients.to_vec() })
    }

    /// Pins the calling thread, and every thread it starts afterwards (an async runtime's
    /// workers, which size themselves by it), to the clients' half.
    pub fn pin_clients(&self) -> io::Result<()> {
        sched_setaffinity(None, &set_of(&self.clients)).map_err(io::Error::from)
    }

    /// Runs `start` on the server's half, so that a process it spawns (which inherits the
    /// calling thread's CPUs from the start, before any thread of its own) runs there; the
    /// calling thread goes back to the clients' half afterwards.
    pub fn on_server_cpus<T>(&self, start: impl FnOnce() -> T) -> io::Result<T> {
        sched_setaffinity(None, &set_of(&self.server)).map_err(io::Error::from)?;
        let started = start();
        self.pin_clients()?;
        Ok(started)
    }
}

fn set_of(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    cpus.iter().for_each(|&cpu| set.set(cpu));
    set
}

fn list(cpus: &[usize]) -> String {
    cpus.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

impl fmt::Display for CpuSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server on CPU {}, clients on CPU {}", list(&self.server), list(&self.clients))
    }
}

impl fmt::Debug for CpuSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_gets_the_first_half_and_the_clients_the_rest() {
        let split = CpuSplit::halves(&[0, 1, 2, 5, 6]).expect("five CPUs split");
        assert_eq!(split.to_string(), "server on CPU 0,1, clients on CPU 2,5,6");
        let two = CpuSplit::halves(&[0, 1]).expect("two CPUs split");
        assert_eq!(two.to_string(), "server on CPU 0, clients on CPU 1");
    }

    #[test]
    fn one_cpu_is_not_split() {
        assert_eq!(CpuSplit::halves(&[3]), None);
        assert_eq!(CpuSplit::halves(&[]), None);
    }
}
