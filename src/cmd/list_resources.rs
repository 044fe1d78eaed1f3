//! `list-resources ETCD`: every resource etcd-druid manages for the Etcd, grouped by kind.

use clap::Args;
use druidctl::kube::inventory::{self, Inventory};
use druidctl::kube::target::{Targets, WhenUnnamed};
use druidctl::output::{Cell, Printable, Style, Table, age, list_document};

use super::{Context, EtcdTargets};

/// Arguments of `list-resources`.
#[derive(Debug, Args)]
pub struct ListResourcesArgs {
    /// The Etcd.
    #[command(flatten)]
    pub target: EtcdTargets,
}

struct InventoryView(Inventory);

impl Printable for InventoryView {
    fn table(&self, wide: bool) -> Table {
        let mut headers = vec!["kind", "name", "age"];
        if wide {
            headers.push("api version");
        }
        let mut t = Table::new(&headers);
        let now = jiff::Timestamp::now();
        for g in &self.0.groups {
            if let Some(why) = &g.unavailable {
                t.row(vec![
                    Cell::plain(&g.kind),
                    Cell::styled(format!("(unavailable: {why})"), Style::Warn),
                    "-".into(),
                ]);
                continue;
            }
            for o in &g.objects {
                let created =
                    o.metadata.creation_timestamp.as_ref().map(|t| age::human(age::seconds_between(t.0, now)));
                let mut row = vec![
                    Cell::plain(&g.kind),
                    Cell::plain(o.metadata.name.clone().unwrap_or_default()),
                    Cell::plain(created.unwrap_or_else(|| "-".into())),
                ];
                if wide {
                    row.push(Cell::plain(o.types.as_ref().map(|t| t.api_version.clone()).unwrap_or_default()));
                }
                t.row(row);
            }
        }
        t
    }
    fn document(&self) -> serde_json::Value {
        let items =
            self.0.groups.iter().flat_map(|g| g.objects.iter()).filter_map(|o| serde_json::to_value(o).ok()).collect();
        list_document(items)
    }
    fn names(&self) -> Vec<String> {
        self.0
            .groups
            .iter()
            .flat_map(|g| {
                g.objects.iter().map(move |o| format!("{}/{}", g.resource, o.metadata.name.clone().unwrap_or_default()))
            })
            .collect()
    }
}

/// Runs `list-resources`.
pub async fn exec(ctx: &mut Context, args: ListResourcesArgs) -> anyhow::Result<()> {
    ctx.check_targets(&args.target.etcds, WhenUnnamed::RequireOneName)?;
    let cluster = ctx.connect().await?;
    let Targets::Named(keys) = ctx.targets(&cluster, &args.target.etcds, WhenUnnamed::RequireOneName)? else {
        unreachable!("RequireOneName yields a name")
    };
    let etcd = druidctl::kube::etcds::get(&cluster.client, &keys[0]).await?;
    let inv = inventory::list(&cluster.client, &etcd).await?;
    ctx.printer.print(&InventoryView(inv))?;
    Ok(())
}
