//! `etcd.conf.yaml`: the etcd configuration etcd-druid v0.37.1 renders into the ConfigMap `<etcd>-config`, and
//! how a member's sidecar reads it back.
//!
//! Rendering: etcd-druid v0.37.1 `internal/component/configmap/etcdconfig.go` builds the struct and
//! `configmap.go` marshals it with `sigs.k8s.io/yaml` (to JSON, then to YAML through a generic map, so the keys come
//! out sorted; [`to_yaml`] goes through a `serde_json::Value`, whose map is sorted, for the same order).
//!
//! Reading: etcd-backup-restore's `/config` endpoint (`pkg/server/httpAPI.go` `serveConfig`), which etcd-wrapper
//! starts etcd with, sets `name` to the member name and replaces both advertise maps with this member's entry
//! (`pkg/miscellaneous/miscellaneous.go` `GetMemberPeerURLs` / `GetMemberClientURLs`: no entry, no start).
//! [`EtcdConf::member_urls`] makes that choice; the older string form of the advertise URLs that etcd-druid
//! v0.23–v0.24 wrote (`<scheme>@<peer service>@<namespace>@<port>`) is read too.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use druid_api::Etcd;
use druid_api::etcd::TlsConfig;

/// Key of the configuration in the ConfigMap (`common.EtcdConfigFileName`).
pub const ETCD_CONF_KEY: &str = "etcd.conf.yaml";

// etcd-druid v0.37.1 internal/common/constants.go: where the StatefulSet mounts the TLS secrets.
/// Mount path of the client CA bundle (`VolumeMountPathEtcdCA`).
pub const MOUNT_ETCD_CA: &str = "/var/etcd/ssl/ca";
/// Mount path of etcd's server key pair (`VolumeMountPathEtcdServerTLS`).
pub const MOUNT_ETCD_SERVER_TLS: &str = "/var/etcd/ssl/server";
/// Mount path of the client key pair (`VolumeMountPathEtcdClientTLS`).
pub const MOUNT_ETCD_CLIENT_TLS: &str = "/var/etcd/ssl/client";
/// Mount path of the peer CA bundle (`VolumeMountPathEtcdPeerCA`).
pub const MOUNT_ETCD_PEER_CA: &str = "/var/etcd/ssl/peer/ca";
/// Mount path of the peer server key pair (`VolumeMountPathEtcdPeerServerTLS`).
pub const MOUNT_ETCD_PEER_SERVER_TLS: &str = "/var/etcd/ssl/peer/server";
/// Mount path of the data volume (`VolumeMountPathEtcdData`).
pub const MOUNT_ETCD_DATA: &str = "/var/etcd/data";

/// Why an `etcd.conf.yaml` cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EtcdConfError {
    /// The text is not YAML of the expected shape.
    #[error("etcd.conf.yaml is not valid: {0}")]
    Yaml(String),
    /// The member has no entry in an advertise URL map (backup-restore refuses to serve its config).
    #[error("no {what} found for member {member} in etcd.conf.yaml")]
    NoUrls {
        /// `peer URLs` or `client URLs`.
        what: &'static str,
        /// The member name looked up.
        member: String,
    },
}

/// `etcd.conf.yaml` (etcd-druid v0.37.1 `etcdConfig` in `internal/component/configmap/etcdconfig.go`). Keys a
/// hand-edited file leaves out read as empty (etcd then uses its own default).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "kebab-case", default)]
pub struct EtcdConf {
    /// `etcd-config`; the sidecar replaces it with the member name.
    pub name: String,
    /// `/var/etcd/data/new.etcd`.
    pub data_dir: String,
    /// `basic` or `extensive`.
    pub metrics: String,
    /// `--snapshot-count`.
    pub snapshot_count: i64,
    /// `--enable-grpc-gateway`.
    pub enable_grpc_gateway: bool,
    /// `--quota-backend-bytes`.
    pub quota_backend_bytes: i64,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// `--initial-cluster-state` (`new`; the sidecar decides `existing` itself).
    pub initial_cluster_state: String,
    /// `--initial-cluster`: `<member>=<peer url>,...`.
    pub initial_cluster: String,
    /// `periodic` or `revision`.
    pub auto_compaction_mode: String,
    /// `--auto-compaction-retention`.
    pub auto_compaction_retention: String,
    /// `<scheme>://0.0.0.0:<peer port>`.
    pub listen_peer_urls: String,
    /// `<scheme>://0.0.0.0:<client port>`.
    pub listen_client_urls: String,
    /// Peer URLs each member advertises.
    pub initial_advertise_peer_urls: AdvertiseUrls,
    /// Client URLs each member advertises.
    pub advertise_client_urls: AdvertiseUrls,
    /// Client TLS (present with `spec.etcd.clientUrlTls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_transport_security: Option<TransportSecurity>,
    /// Peer TLS (present with `spec.etcd.peerUrlTls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_transport_security: Option<TransportSecurity>,
    /// `spec.memberNamePrefix` (omitted when empty).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub member_name_prefix: String,
    /// Always `true` from etcd-druid v0.37 (omitted when false).
    #[serde(skip_serializing_if = "is_false")]
    pub next_cluster_version_compatible: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `client-transport-security` / `peer-transport-security` (etcd-druid v0.37.1 `securityConfig`).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", default)]
pub struct TransportSecurity {
    /// PEM certificate the member serves (a path in the container).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cert_file: String,
    /// Its private key.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub key_file: String,
    /// Whether clients must present a certificate.
    #[serde(skip_serializing_if = "is_false")]
    pub client_cert_auth: bool,
    /// CA bundle client certificates are checked against.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub trusted_ca_file: String,
    /// Always written, `false`.
    pub auto_tls: bool,
    /// Peer block only, with `spec.etcd.peerUrlTls.skipClientSANVerification`.
    #[serde(skip_serializing_if = "is_false")]
    pub skip_client_san_verification: bool,
}

/// `initial-advertise-peer-urls` / `advertise-client-urls`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum AdvertiseUrls {
    /// etcd-druid v0.25+: member name to its URLs.
    PerMember(BTreeMap<String, Vec<String>>),
    /// etcd-druid v0.23–v0.24: `<scheme>@<peer service>@<namespace>@<port>`, the same for every member; the
    /// sidecar made `<scheme>://<pod>.<peer service>.<namespace>.svc:<port>` of it.
    Template(String),
}

impl Default for AdvertiseUrls {
    fn default() -> Self {
        AdvertiseUrls::PerMember(BTreeMap::new())
    }
}

impl AdvertiseUrls {
    /// The URLs of member `member` (pod `pod`); empty when the map has no entry for it.
    pub fn of(&self, member: &str, pod: &str) -> Vec<String> {
        match self {
            AdvertiseUrls::PerMember(map) => map.get(member).cloned().unwrap_or_default(),
            AdvertiseUrls::Template(t) => match t.split('@').collect::<Vec<_>>().as_slice() {
                [scheme, svc, ns, port] => vec![format!("{scheme}://{pod}.{svc}.{ns}.svc:{port}")],
                _ => Vec::new(),
            },
        }
    }
}

/// What the sidecar hands etcd for one member: the file with `name` and both advertise URL lists resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberConf {
    /// The member name.
    pub name: String,
    /// This member's peer URLs.
    pub peer_urls: Vec<String>,
    /// This member's client URLs.
    pub client_urls: Vec<String>,
    /// `initial-cluster` as `(member, peer url)` pairs.
    pub initial_cluster: Vec<(String, String)>,
    /// The whole file, for the other keys.
    pub conf: EtcdConf,
}

impl EtcdConf {
    /// Parses `etcd.conf.yaml` as YAML.
    pub fn parse(yaml: &str) -> Result<EtcdConf, EtcdConfError> {
        serde_saphyr::from_str(yaml).map_err(|e| EtcdConfError::Yaml(e.to_string()))
    }

    /// `member-name-prefix`, when set.
    pub fn member_name_prefix(&self) -> Option<&str> {
        Some(self.member_name_prefix.as_str()).filter(|p| !p.is_empty())
    }

    /// `initial-cluster` as `(member, peer url)` pairs.
    pub fn initial_cluster_pairs(&self) -> Vec<(String, String)> {
        parse_initial_cluster(&self.initial_cluster)
    }

    /// The configuration of the member in pod `pod`, as backup-restore's `serveConfig` resolves it: the member name
    /// is `<member-name-prefix>-<pod>` (or the pod name), its advertise URLs its own entries.
    pub fn member_urls(&self, pod: &str) -> Result<MemberConf, EtcdConfError> {
        let name = match self.member_name_prefix() {
            Some(p) => format!("{p}-{pod}"),
            None => pod.to_string(),
        };
        let peer_urls = self.initial_advertise_peer_urls.of(&name, pod);
        if peer_urls.is_empty() {
            return Err(EtcdConfError::NoUrls { what: "peer URLs", member: name });
        }
        let client_urls = self.advertise_client_urls.of(&name, pod);
        if client_urls.is_empty() {
            return Err(EtcdConfError::NoUrls { what: "client URLs", member: name });
        }
        Ok(MemberConf {
            name,
            peer_urls,
            client_urls,
            initial_cluster: self.initial_cluster_pairs(),
            conf: self.clone(),
        })
    }
}

/// Parses `initial-cluster` into `(name, peer url)` pairs.
pub fn parse_initial_cluster(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|e| e.trim().split_once('='))
        .map(|(n, u)| (n.trim().to_string(), u.trim().to_string()))
        .filter(|(n, _)| !n.is_empty())
        .collect()
}

/// The YAML text etcd-druid writes for `conf`: keys sorted, as `sigs.k8s.io/yaml` emits them.
pub fn to_yaml(conf: &EtcdConf) -> String {
    // serde_json's map is a BTreeMap (no `preserve_order` in this workspace): sorted keys.
    let value = serde_json::to_value(conf).expect("etcd.conf.yaml serializes");
    serde_saphyr::to_string(&value).expect("JSON value serializes as YAML")
}

// etcd-druid v0.37.1 internal/component/configmap/etcdconfig.go: defaults.
const DEFAULT_DB_QUOTA_BYTES: i64 = 8 * 1024 * 1024 * 1024;
const DEFAULT_AUTO_COMPACTION_RETENTION: &str = "30m";
const DEFAULT_SNAPSHOT_COUNT: i64 = 10000;
/// `common.DefaultPortEtcdClient`.
pub const DEFAULT_CLIENT_PORT: i32 = 2379;
/// `common.DefaultPortEtcdPeer`.
pub const DEFAULT_PEER_PORT: i32 = 2380;

/// etcd-druid v0.37.1 internal/component/configmap/etcdconfig.go `createEtcdConfig`: the file for `etcd`.
/// (`backend-bbolt-freelist-type` is written only with the alpha feature gate `UpgradeEtcdVersion`, off by default.)
pub fn render(etcd: &Etcd) -> EtcdConf {
    let spec = &etcd.spec;
    let ns = etcd.metadata.namespace.as_deref().unwrap_or_default();
    let client_port = spec.etcd.client_port.unwrap_or(DEFAULT_CLIENT_PORT);
    let peer_port = spec.etcd.server_port.unwrap_or(DEFAULT_PEER_PORT);
    let (client_scheme, client_security) =
        scheme_and_security(spec.etcd.client_url_tls.as_ref(), MOUNT_ETCD_CA, MOUNT_ETCD_SERVER_TLS);
    let (peer_scheme, peer_security) =
        scheme_and_security(spec.etcd.peer_url_tls.as_ref(), MOUNT_ETCD_PEER_CA, MOUNT_ETCD_PEER_SERVER_TLS);
    let names = etcd.managed_names();
    // `prepareInitialCluster` and `getAdvertiseURLs`: the headless peer service's DNS names of the pods.
    let domain = format!("{}.{ns}.svc", names.peer_service());
    let pods: Vec<(String, String)> =
        (0..spec.replicas.max(0) as u32).map(|i| (names.member(i), names.pod(i))).collect();
    let advertise = |scheme: &str, port: i32| {
        AdvertiseUrls::PerMember(
            pods.iter().map(|(m, p)| (m.clone(), vec![format!("{scheme}://{p}.{domain}:{port}")])).collect(),
        )
    };
    let common = spec.common.clone().unwrap_or_default();
    EtcdConf {
        name: "etcd-config".into(),
        data_dir: format!("{MOUNT_ETCD_DATA}/new.etcd"),
        metrics: spec.etcd.metrics.clone().unwrap_or_else(|| "basic".into()),
        snapshot_count: spec.etcd.snapshot_count.unwrap_or(DEFAULT_SNAPSHOT_COUNT),
        enable_grpc_gateway: spec.etcd.enable_grpc_gateway.unwrap_or(false),
        quota_backend_bytes: spec.etcd.quota.as_ref().and_then(quantity_value).unwrap_or(DEFAULT_DB_QUOTA_BYTES),
        initial_cluster_token: "etcd-cluster".into(),
        initial_cluster_state: "new".into(),
        initial_cluster: pods
            .iter()
            .map(|(m, p)| format!("{m}={peer_scheme}://{p}.{domain}:{peer_port}"))
            .collect::<Vec<_>>()
            .join(","),
        auto_compaction_mode: common.auto_compaction_mode.unwrap_or_else(|| "periodic".into()),
        auto_compaction_retention: common
            .auto_compaction_retention
            .unwrap_or_else(|| DEFAULT_AUTO_COMPACTION_RETENTION.into()),
        listen_peer_urls: format!("{peer_scheme}://0.0.0.0:{peer_port}"),
        listen_client_urls: format!("{client_scheme}://0.0.0.0:{client_port}"),
        initial_advertise_peer_urls: advertise(peer_scheme, peer_port),
        advertise_client_urls: advertise(client_scheme, client_port),
        client_transport_security: client_security,
        peer_transport_security: peer_security,
        member_name_prefix: spec.member_name_prefix.clone().unwrap_or_default(),
        next_cluster_version_compatible: true,
    }
}

/// etcdconfig.go `getSchemeAndSecurityConfig`: `https` and the mounted files with TLS, else `http`.
fn scheme_and_security(
    tls: Option<&TlsConfig>,
    ca_path: &str,
    server_path: &str,
) -> (&'static str, Option<TransportSecurity>) {
    match tls {
        Some(tls) => (
            "https",
            Some(TransportSecurity {
                cert_file: format!("{server_path}/tls.crt"),
                key_file: format!("{server_path}/tls.key"),
                client_cert_auth: true,
                trusted_ca_file: format!("{ca_path}/{}", tls.tls_ca_secret_ref.data_key.as_deref().unwrap_or("ca.crt")),
                auto_tls: false,
                skip_client_san_verification: false,
            }),
        ),
        None => ("http", None),
    }
}

pub use druid_api::quantity::int_or_string_bytes as quantity_value;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_its_own_advertise_urls_and_none_without_an_entry() {
        let conf = EtcdConf::parse(
            "initial-cluster: m-0=https://m-0.m-peer.ns.svc:2380\n\
             initial-advertise-peer-urls:\n  m-0:\n  - https://m-0.m-peer.ns.svc:2380\n\
             advertise-client-urls:\n  m-0:\n  - https://m-0.m-peer.ns.svc:2379\n",
        )
        .unwrap();
        let m = conf.member_urls("m-0").unwrap();
        assert_eq!(m.peer_urls, ["https://m-0.m-peer.ns.svc:2380"]);
        assert_eq!(m.client_urls, ["https://m-0.m-peer.ns.svc:2379"]);
        assert_eq!(m.initial_cluster, [("m-0".to_string(), "https://m-0.m-peer.ns.svc:2380".to_string())]);
        assert_eq!(
            conf.member_urls("m-1").unwrap_err(),
            EtcdConfError::NoUrls { what: "peer URLs", member: "m-1".into() }
        );
    }

    #[test]
    fn the_older_template_form_names_the_pod() {
        let conf = EtcdConf::parse(
            "initial-advertise-peer-urls: https@m-peer@ns@2380\nadvertise-client-urls: https@m-peer@ns@2379\n",
        )
        .unwrap();
        let m = conf.member_urls("m-2").unwrap();
        assert_eq!(m.peer_urls, ["https://m-2.m-peer.ns.svc:2380"]);
        assert_eq!(m.client_urls, ["https://m-2.m-peer.ns.svc:2379"]);
    }

    #[test]
    fn quantities() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(quantity_value(&IntOrString::String("8Gi".into())), Some(8589934592));
        assert_eq!(quantity_value(&IntOrString::String("100Mi".into())), Some(104857600));
        assert_eq!(quantity_value(&IntOrString::Int(5)), Some(5));
    }

    #[test]
    fn what_is_rendered_parses_back() {
        let etcd = crate::resources::tests::etcd(3);
        let conf = render(&etcd);
        assert_eq!(EtcdConf::parse(&to_yaml(&conf)).unwrap(), conf);
    }
}
