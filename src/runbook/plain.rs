//! Why a step waits, in plain words: the reasons the engine reports quote what etcd, the API server or a pod
//! said (gRPC codes, URLs, endpoints); people at a terminal get what it means for the run instead.

/// `reason` (parts separated by `; `) with the raw errors people cannot act on said in plain words: etcd's
/// "too many learner members in cluster" (a new member waits until the one before it has caught up: etcd admits
/// one learner at a time) and gRPC codes. Parts that say the same once rewritten are kept once.
pub fn plain_reason(reason: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for part in reason.split("; ").map(str::trim).filter(|p| !p.is_empty()) {
        let plain = plain_part(part);
        if !out.contains(&plain) {
            out.push(plain);
        }
    }
    out.join("; ")
}

const LEARNER: &str = "waits for the previous new member to catch up (etcd admits one learner at a time)";

fn plain_part(part: &str) -> String {
    if part.contains("too many learner members") {
        // `pod NAME is not ready (… refused /v3/cluster/member/add: etcdserver: too many learner members …)`
        if let Some(rest) = part.strip_prefix("pod ")
            && let Some(name) = rest.split_whitespace().next()
        {
            return format!("{name} {LEARNER}");
        }
        return format!("a new member {LEARNER}");
    }
    strip_grpc_code(part)
}

/// Drops ` (grpc code N)`, which says nothing to a person.
fn strip_grpc_code(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(i) = out.find(" (grpc code ") {
        match out[i..].find(')') {
            Some(j) => out.replace_range(i..i + j + 1, ""),
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learner_refusals_become_plain_words() {
        let raw = "pod etcd-main-1 is not ready (Unhealthy); pod etcd-main-2 is not ready (Unhealthy: PodInitializing \
                   waiting to join as learner: etcd at http://127.0.0.1:15361 refused /v3/cluster/member/add: \
                   etcdserver: too many learner members in cluster (grpc code 9)); etcd condition AllMembersReady is \
                   False (NotAllMembersReady)";
        assert_eq!(
            plain_reason(raw),
            "pod etcd-main-1 is not ready (Unhealthy); etcd-main-2 waits for the previous new member to catch up \
             (etcd admits one learner at a time); etcd condition AllMembersReady is False (NotAllMembersReady)"
        );
        assert_eq!(
            plain_reason("member add refused: etcdserver: too many learner members in cluster (grpc code 9)"),
            "a new member waits for the previous new member to catch up (etcd admits one learner at a time)"
        );
    }

    #[test]
    fn other_reasons_stay_and_lose_only_grpc_codes() {
        assert_eq!(plain_reason("pods still present: etcd-main-0"), "pods still present: etcd-main-0");
        assert_eq!(plain_reason("etcd unavailable (grpc code 14); x"), "etcd unavailable; x");
        assert_eq!(plain_reason("a; a"), "a");
    }
}
