//! Real etcd member processes on loopback, and a small etcd v3 client over its JSON gateway.
