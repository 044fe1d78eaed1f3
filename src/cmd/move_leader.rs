//! `move-leader ETCD MEMBER`: hand etcd's leadership to another member (etcd's MoveLeader), e.g. before
//! maintenance of the leader's node or to take load off a slow node. Refused for a learner or a member that is
//! not ready.

use std::time::Duration;

use clap::Args;
use clap_complete::engine::ArgValueCompleter;
use druidctl::etcd::EtcdError;
use druidctl::etcd::actions::{move_leader, move_leader_refusal};
use druidctl::output::OutputFormat;

use super::Context;
use super::check::load;

/// Arguments of `move-leader`.
#[derive(Debug, Args)]
pub struct MoveLeaderArgs {
    /// The Etcd: NAME or NAMESPACE/NAME.
    #[arg(value_name = "ETCD", value_parser = super::parse_etcd_ref, add = ArgValueCompleter::new(super::completion::etcd_names))]
    pub etcd: String,
    /// The member to lead (its member or pod name, e.g. etcd-main-1).
    #[arg(value_name = "MEMBER", value_parser = super::parse_object_name, add = ArgValueCompleter::new(super::completion::members))]
    pub member: String,
    /// How long to wait until the member leads.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::duration_in(100, 600))]
    pub timeout: Duration,
}

/// What `move-leader` did.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Moved {
    etcd: druidctl::kube::ObjectKey,
    from: Option<String>,
    to: String,
    message: String,
}

/// Runs `move-leader`.
pub async fn exec(ctx: &mut Context, args: MoveLeaderArgs) -> anyhow::Result<()> {
    let loaded = load(ctx, &args.etcd, druidctl::etcd::MEMBER_READ_TIMEOUT).await?;
    let names = loaded.inputs.etcd.managed_names();
    let Some(target) =
        loaded.report.members.iter().find(|m| m.name == args.member || names.pod(m.index) == args.member)
    else {
        let all: Vec<&str> = loaded.report.members.iter().map(|m| m.name.as_str()).collect();
        return Err(EtcdError::NotFound(format!(
            "Etcd {} has no member {:?} (members: {})",
            loaded.key,
            args.member,
            all.join(", ")
        ))
        .into());
    };
    let obs = loaded.inputs.etcd_observation.as_ref();
    let reading = |index: u32| obs.and_then(|o| o.members.get(index as usize)).and_then(|r| r.outcome.as_ref().ok());
    let target_status = reading(target.index);
    if let Some(why) = move_leader_refusal(&target.name, target_status, target.ready) {
        return Err(EtcdError::Refused(format!("{why}; nothing was changed")).into());
    }
    let target_status = target_status.expect("refused above without a status");
    let leader = loaded.report.members.iter().find(|m| reading(m.index).is_some_and(|s| s.is_leader()));
    let pod_of = |index: u32| {
        let pod = names.pod(index);
        loaded.inputs.pods.iter().find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
    };
    let moved = match leader {
        Some(l) if l.index == target.index => Moved {
            etcd: loaded.key.clone(),
            from: Some(l.name.clone()),
            to: target.name.clone(),
            message: format!("member {} already leads Etcd {}; nothing to do", target.name, loaded.key),
        },
        Some(l) => {
            let (Some(leader_pod), Some(target_pod)) = (pod_of(l.index), pod_of(target.index)) else {
                return Err(EtcdError::Unreachable("a member pod disappeared while asking".into()).into());
            };
            move_leader(
                &loaded.cluster.client,
                &loaded.inputs.etcd,
                leader_pod,
                target_pod,
                target_status.member_id,
                args.timeout,
            )
            .await?;
            Moved {
                etcd: loaded.key.clone(),
                from: Some(l.name.clone()),
                to: target.name.clone(),
                message: format!("leadership of Etcd {} moved from {} to {}", loaded.key, l.name, target.name),
            }
        }
        None => {
            return Err(EtcdError::Unreachable(format!(
                "no member of Etcd {} says it leads (or the leader's etcd did not answer); nothing was changed",
                loaded.key
            ))
            .into());
        }
    };
    match ctx.printer.format() {
        OutputFormat::Json => ctx.printer.json(&moved)?,
        OutputFormat::Yaml => ctx.printer.yaml(&moved)?,
        OutputFormat::Jsonl => ctx.printer.jsonl(&moved)?,
        OutputFormat::Name => ctx.printer.text(&format!("etcd.druid.gardener.cloud/{}\n", loaded.key.name))?,
        OutputFormat::Table | OutputFormat::Wide => ctx.printer.text(&format!("{}\n", moved.message))?,
    }
    Ok(())
}
