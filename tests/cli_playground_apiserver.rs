//! `druidctl playground apiserver` as kubectl sees it: HTTPS with the bearer token in the kubeconfig's user
//! entry, so that `kubectl get --raw` authenticates; users made with `--user NAME[:GROUP…]`; an unknown token is
//! 401 and a call without credentials 403, as on kube-apiserver (the differential test checks the same answers
//! against the real one).

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The API server process, SIGKILLed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl").arg("--kubeconfig").arg(kubeconfig).args(args).stdin(Stdio::null()).output().unwrap()
}

#[test]
fn kubectl_raw_authenticates_with_the_kubeconfig_token_and_users_get_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = Proc(
        Command::new(env!("CARGO_BIN_EXE_druidctl"))
            .args(["playground", "apiserver", "--listen", "127.0.0.1:0", "--user", "limited", "--user"])
            .arg("ops:viewers:audit")
            .arg("--kubeconfig-out")
            .arg(&kc)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // It prints where it listens once the kubeconfigs are written.
    let mut first = [0u8; 1];
    assert_eq!(child.0.stdout.as_mut().unwrap().read(&mut first).unwrap(), 1, "playground apiserver exited");
    let yaml = std::fs::read_to_string(&kc).unwrap();
    assert!(yaml.contains("server: https://127.0.0.1:") && yaml.contains("certificate-authority-data:"), "{yaml}");
    assert!(!yaml.contains("/u/"), "the token belongs in the user entry, not in the URL: {yaml}");

    let ok = kubectl(&kc, &["get", "--raw", "/api/v1/namespaces/default"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains(r#""name":"default""#));

    let ops =
        kubectl(&dir.path().join("kubeconfig-ops"), &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"]);
    assert_eq!(String::from_utf8_lossy(&ops.stdout), r#"["viewers","audit","system:authenticated"]"#);

    let limited = kubectl(&dir.path().join("kubeconfig-limited"), &["get", "--raw", "/api/v1/namespaces"]);
    assert!(!limited.status.success());
    assert!(
        String::from_utf8_lossy(&limited.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&limited.stderr)
    );

    let token = yaml.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap().to_string();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, yaml.replace(&token, "not-a-known-token")).unwrap();
    let unknown = kubectl(&bad, &["get", "--raw", "/version"]);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );

    // Without credentials (kubectl would prompt for them): through kube-rs.
    let anon_yaml: String =
        yaml.lines().filter(|l| !l.trim().starts_with("token:")).map(|l| format!("{l}\n")).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let code = rt.block_on(async {
        let kc = kube::config::Kubeconfig::from_yaml(&anon_yaml).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let req = http::Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
        match client.request_text(req).await {
            Err(kube::Error::Api(e)) => e.code,
            other => panic!("anonymous list answered {other:?}"),
        }
    });
    assert_eq!(code, 403);
}
