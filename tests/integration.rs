//! druidctl's integration suite, built as ONE test binary: every `tests/<name>.rs` is a module of it, named as
//! the file, and the helpers under `tests/<name>_support/` are shared modules. One binary instead of one per
//! file keeps the build within a small CI disk (each test binary links all of kube, k8s-openapi and the
//! embedded API server) and links once. Tests are addressed as `<file>::<test>`, e.g.
//! `cargo nextest run --test integration -E 'test(/^runbook_recovery::/)'`.

mod certs_machines_support;
mod cli_support;
mod e2e_support;
mod etcd_support;
mod realk8s_support;
mod runbook_support;
mod seed_support;
mod tasks_support;

mod apiserver_differential;
mod certs_renew;
mod cli_actions;
mod cli_bad_inputs;
mod cli_completion_bash;
mod cli_completion_shells;
mod cli_generated;
mod cli_kubectl_plugin;
mod cli_output_snapshots;
mod cli_playground_apiserver;
mod cli_playground_dir;
mod cli_status_snapshots;
mod cli_upstream_aliases;
mod crd_validation;
mod demo_binary;
mod deploy_manifests;
mod krew_manifest;
mod landscape_certs_machines;
mod landscape_etcd;
mod landscape_etcd_view;
mod landscape_external;
mod landscape_leaks;
mod landscape_logs;
mod landscape_playground;
mod machines_delete;
mod man_pages;
mod rbac_real;
mod report_real;
mod runbook_certs_machines;
mod runbook_certs_playground;
mod runbook_docs;
mod runbook_kill_matrix;
mod runbook_machine_cluster;
mod runbook_member_restore;
mod runbook_recovery;
mod runbook_refusals;
mod runbook_safety;
mod runbook_space_recovery;
mod serve_logs;
mod sim_members;
mod status_etcd_unreached;
mod status_request_budget;
mod status_seed_golden;
mod status_watch_outage;
mod tasks_cli;
mod tasks_engine;
mod tasks_etcd_access;
mod tasks_local_orphans;
mod tasks_playground;
mod tasks_serve_failover;
mod tasks_types;
mod watch_restart_real;
mod workspace_boundaries;
