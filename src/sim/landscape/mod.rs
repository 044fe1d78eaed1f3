//! The simulated landscape: etcd-druid, StatefulSet controller/kubelet, backup-restore sidecar, DWD actors.
