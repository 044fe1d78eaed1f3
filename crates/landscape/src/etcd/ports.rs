//! Free loopback ports for etcd members.
//!
//! etcd binds its ports itself, so a port is chosen here and handed over. Tests run in parallel in
//! separate processes (nextest), so ports are drawn at random from a range below the kernel's ephemeral
//! range (outgoing connections never take them) and checked bindable; within this process a port is
//! never handed out twice.

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::sync::{Mutex, OnceLock};

const RANGE: std::ops::Range<u16> = 12000..30000;

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static SET: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    SET.get_or_init(Default::default)
}

/// A loopback TCP port that is free right now and was not handed out before by this process.
pub fn free_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::rng();
    for _ in 0..10_000 {
        let port = rng.random_range(RANGE);
        if !is_free(port) {
            continue;
        }
        if handed_out().lock().expect("port set").insert(port) {
            return port;
        }
    }
    // Fall back to an ephemeral port chosen by the kernel.
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// Whether `port` can be bound on 127.0.0.1 right now.
pub fn is_free(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let set: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(set.len(), ports.len());
        assert!(ports.iter().all(|p| is_free(*p)));
    }
}
