//! Finding Etcds: by name (with a "did you mean -n …" hint when it exists elsewhere), in a namespace, or in
//! all namespaces, optionally by label selector.

use kube::Client;
use kube::api::{Api, ListParams};

use super::error::{ClusterError, Subject};
use super::target::{ObjectKey, Targets};
use crate::api::Etcd;

/// Gets one Etcd; a miss says where an Etcd of that name does exist, when the user may list all namespaces.
pub async fn get(client: &Client, key: &ObjectKey) -> Result<Etcd, ClusterError> {
    let api: Api<Etcd> = Api::namespaced(client.clone(), &key.namespace);
    let subject = Subject { kind: "etcd", name: &key.name, namespace: &key.namespace };
    match api.get(&key.name).await {
        Ok(e) => Ok(e),
        Err(e) => {
            let err = ClusterError::from_kube(e, &subject);
            if matches!(err, ClusterError::NotFound { .. })
                && let Some(hint) = elsewhere_hint(client, key).await
            {
                return Err(err.with_hint(hint));
            }
            Err(err)
        }
    }
}

async fn elsewhere_hint(client: &Client, key: &ObjectKey) -> Option<String> {
    let all: Api<Etcd> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("metadata.name={}", key.name));
    let found = all.list_metadata(&lp).await.ok()?;
    let namespaces: Vec<String> = found.items.iter().filter_map(|m| m.metadata.namespace.clone()).collect();
    match namespaces.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean -n {one}?")),
        many => Some(format!("it exists in namespaces {}", many.join(", "))),
    }
}

/// Resolves targets to Etcds. Named targets that do not exist are errors; an empty namespace is not.
pub async fn resolve(client: &Client, targets: &Targets) -> Result<Vec<Etcd>, ClusterError> {
    match targets {
        Targets::Named(keys) => futures::future::try_join_all(keys.iter().map(|k| get(client, k))).await,
        Targets::Namespace { namespace, selector } => list(client, selector.as_deref(), Some(namespace)).await,
        Targets::AllNamespaces { selector } => list(client, selector.as_deref(), None).await,
    }
}

async fn list(client: &Client, selector: Option<&str>, namespace: Option<&str>) -> Result<Vec<Etcd>, ClusterError> {
    // In pages of 500, as kubectl reads (`--chunk-size`), decoded without the managedFields nobody here reads
    // (`slim`): memory follows the Etcds, not the largest response.
    let mut lp = ListParams::default().limit(500);
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    let mut items = Vec::new();
    loop {
        let (page, next) = super::slim::list_page::<Etcd>(client, namespace, &lp).await.map_err(|e| {
            ClusterError::from_kube(e, &Subject { kind: "etcd", name: "", namespace: namespace.unwrap_or_default() })
        })?;
        items.extend(page);
        match next {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    items.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
    Ok(items)
}

/// The key of an Etcd object.
pub fn key_of(etcd: &Etcd) -> ObjectKey {
    ObjectKey {
        namespace: etcd.metadata.namespace.clone().unwrap_or_default(),
        name: etcd.metadata.name.clone().unwrap_or_default(),
    }
}
