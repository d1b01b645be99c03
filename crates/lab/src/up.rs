//! Bringing a lab up, either kind: its checks before anything is built, its entry in
//! the registry, and what carries its packets: the emulator, built from a topology
//! ([`crate::graph`]; a dumbbell's the one `tcplab lab topology` prints), or netem on a
//! veth pair. On any error, what was made is removed.
//!
//! Addresses: a dumbbell's server is 10.77.0.1/16 and fd00:77::1/64; client k (from 1)
//! is 10.77.1.k and fd00:77::1:k. A topology file's host k is 10.77.0.k. Every lab has
//! its own namespaces, so labs never clash.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tcplab_netsim::dumbbell::{link_seed, LinkRole};
use tcplab_netsim::link::LinkTraces;
use tcplab_netsim::path::Direction;
use tcplab_netsim::topology::Topology;
use tcplab_sys::clock::realtime_us;
use tcplab_sys::netem;
use tcplab_sys::netns::{self, NetNs};

use crate::graph::{self, host_addrs, topology_record, Shape};
use crate::lab::{io_err, is_ideal, set_sysctls, set_txqueuelen, Emulator, Host, TUN_NAME};
use crate::registry::{self, HostEntry, LabEntry};
use crate::{Backend, Lab, LabConfig, LabError, LabPlan, TopologyConfig};

impl Lab {
    /// Builds either shape of lab ([`Lab::up`], [`Lab::up_topology`]).
    pub fn up_plan(plan: &LabPlan) -> Result<Lab, LabError> {
        match plan {
            LabPlan::Dumbbell(config) => Lab::up(config),
            LabPlan::Topology(config) => Lab::up_topology(config),
        }
    }

    /// Builds a dumbbell's lab (`--path`, `access`) and starts what carries its packets.
    /// On any error, what was made is removed.
    pub fn up(config: &LabConfig) -> Result<Lab, LabError> {
        registry::check_name(&config.name).map_err(LabError::Name)?;
        netns::ready().map_err(LabError::Privilege)?;
        if config.clients.is_empty() || config.clients.len() > 250 {
            return Err(LabError::Name(format!(
                "a lab has 1 to 250 clients, not {}",
                config.clients.len()
            )));
        }
        // Unpinned, each lab draws its own seed; the spec it prints and records names
        // it, so that `seed N` gives the same draws again.
        let mut config = config.clone();
        config.path.seed.get_or_insert_with(rand::random);
        let config = &config;
        config.dumbbell().check().map_err(LabError::Specs)?;
        // The emulator carries the dumbbell as the topology `lab topology` prints, every
        // trace read first; netem refuses traces, naming them, when it builds.
        let emulated = match config.backend {
            Backend::Emulator => {
                let topology = as_topology(config)?;
                let traces = graph::load_all_traces(&topology)?;
                Some((topology, traces))
            }
            Backend::Netem => None,
        };
        if let Some(spec) = &config.capture {
            if !spec.at.is_bottleneck() && config.clients.iter().any(|a| !is_ideal(a)) {
                return Err(LabError::Name(format!(
                    "--capture-at {} needs clients without an access link (--client-path): the host would see its packets elsewhere than the bottleneck's ends; capture at the bottleneck",
                    spec.at.name()
                )));
            }
        }
        let (server_v4, server_v6) = server_addrs();
        let single = config.clients.len() == 1;
        let client_ns = |k: usize| {
            if single {
                format!("{}-client", config.name)
            } else {
                format!("{}-client{k}", config.name)
            }
        };
        let entry = LabEntry {
            name: config.name.clone(),
            pid: netns::own_pid(),
            path: config.path.to_string(),
            server: HostEntry {
                ns: format!("{}-server", config.name),
                addr: server_v4.to_string(),
                addr6: server_v6.to_string(),
                access: None,
            },
            clients: config
                .clients
                .iter()
                .enumerate()
                .map(|(i, access)| {
                    let (v4, v6) = client_addrs(i as u16 + 1);
                    HostEntry {
                        ns: client_ns(i + 1),
                        addr: v4.to_string(),
                        addr6: v6.to_string(),
                        access: (!is_ideal(access)).then(|| access.to_string()),
                    }
                })
                .collect(),
            created_unix_us: realtime_us(),
            topology: None,
        };
        registry::register(&entry).map_err(io_err(format!("registering lab '{}'", config.name)))?;
        // From here on, a failure must undo what was made.
        let mut made = Vec::new();
        let built = Self::build(config, emulated, entry.clone(), &mut made);
        if built.is_err() {
            for ns in made {
                let _ = NetNs::delete(&ns);
            }
            registry::unregister(&config.name);
        }
        built
    }

    /// The lab: the emulator carrying `emulated` (the dumbbell's topology and its
    /// traces), or else netem.
    fn build(
        config: &LabConfig,
        emulated: Option<(Topology, Vec<LinkTraces>)>,
        entry: LabEntry,
        made: &mut Vec<NetNs>,
    ) -> Result<Lab, LabError> {
        let Some((topology, traces)) = emulated else {
            return Self::build_netem(config, entry, made);
        };
        let addrs: Vec<(IpAddr, IpAddr)> = std::iter::once(server_addrs())
            .chain((1..=config.clients.len() as u16).map(client_addrs))
            .collect();
        graph::build(
            &topology,
            Shape::Dumbbell(config),
            config.seed(),
            traces,
            (entry, &addrs),
            made,
        )
    }

    /// The same path with the kernel's netem on a veth pair: up on the client's end,
    /// down on the server's. Translated and probed before anything is made.
    fn build_netem(
        config: &LabConfig,
        entry: LabEntry,
        made: &mut Vec<NetNs>,
    ) -> Result<Lab, LabError> {
        if config.clients.len() != 1 || !is_ideal(&config.clients[0]) {
            return Err(LabError::Name(
                "the netem backend builds no dumbbell: use the emulator backend".into(),
            ));
        }
        let path = &config.path;
        netem::check_path(path)?;
        let rtt_us = config.dumbbell().bdp_rtt_us(LinkRole::Bottleneck);
        let options = |dir| -> Result<_, LabError> {
            let mut options = netem::netem_options(path.link(dir), rtt_us, path.mtu)?;
            options.seed = Some(link_seed(config.seed(), LinkRole::Bottleneck, dir));
            Ok(options)
        };
        let (up, down) = (options(Direction::Up)?, options(Direction::Down)?);
        netem::probe_netem()?;
        let make = |name: &str, made: &mut Vec<NetNs>| {
            let ns = NetNs::create(name).map_err(io_err(format!("creating netns {name}")))?;
            made.push(ns.clone());
            Ok::<_, LabError>(ns)
        };
        let server_ns = make(&entry.server.ns, made)?;
        let client_ns = make(&entry.clients[0].ns, made)?;
        client_ns
            .try_run(|| netns::create_veth(TUN_NAME, TUN_NAME, Some(&server_ns)))
            .map_err(io_err("creating the veth pair"))?;
        let (server_v4, server_v6) = server_addrs();
        let (client_v4, client_v6) = client_addrs(1);
        for (ns, v4, v6, opts, sends) in [
            (&server_ns, server_v4, server_v6, &down, Direction::Down),
            (&client_ns, client_v4, client_v6, &up, Direction::Up),
        ] {
            ns.try_run(|| {
                netns::link_up("lo")?;
                netns::set_mtu(TUN_NAME, path.mtu)?;
                netns::add_address(TUN_NAME, v4, 16)?;
                netns::add_address(TUN_NAME, v6, 64)?;
                netns::link_up(TUN_NAME)
            })
            .map_err(io_err(format!("setting up {}", ns.name())))?;
            set_txqueuelen(ns, path.link(sends))?;
            set_sysctls(ns, &config.sysctls)?;
            ns.run(|| netem::apply_netem(TUN_NAME, opts))
                .map_err(io_err(format!("entering {}", ns.name())))??;
        }
        Ok(Lab {
            entry,
            server: Host {
                ns: server_ns,
                addr: server_v4,
                addr6: server_v6,
            },
            clients: vec![Host {
                ns: client_ns,
                addr: client_v4,
                addr6: client_v6,
            }],
            emulator: Emulator::none(),
            pacing_targets: Default::default(),
            alive: true,
        })
    }

    /// Builds a topology's lab and starts its emulator. Every link's traces are read
    /// before anything is built; on any error, what was made is removed.
    pub fn up_topology(config: &TopologyConfig) -> Result<Lab, LabError> {
        registry::check_name(&config.name).map_err(LabError::Name)?;
        let topology = &config.topology;
        if let Some(capture) = &config.capture {
            capture.check(topology)?;
        }
        let traces = graph::load_all_traces(topology)?;
        netns::ready().map_err(LabError::Privilege)?;
        if let Some(capture) = &config.capture {
            std::fs::create_dir_all(&capture.dir).map_err(io_err(format!(
                "the captures' directory {}",
                capture.dir.display()
            )))?;
        }
        let hosts: Vec<usize> = topology.hosts().collect();
        if hosts.len() > 250 {
            return Err(LabError::Name(format!(
                "a lab has at most 250 hosts, not {}",
                hosts.len()
            )));
        }
        let seed = config.seed.unwrap_or_else(rand::random);
        let addrs: Vec<(IpAddr, IpAddr)> = (1..=hosts.len() as u16).map(host_addrs).collect();
        let host_entries: Vec<HostEntry> = hosts
            .iter()
            .zip(&addrs)
            .map(|(&node, (v4, v6))| HostEntry {
                ns: format!("{}-{}", config.name, topology.nodes[node].name),
                addr: v4.to_string(),
                addr6: v6.to_string(),
                access: None,
            })
            .collect();
        let entry = LabEntry {
            name: config.name.clone(),
            pid: netns::own_pid(),
            path: String::new(),
            server: host_entries[0].clone(),
            clients: host_entries[1..].to_vec(),
            created_unix_us: realtime_us(),
            topology: Some(topology_record(topology, &config.file, seed)),
        };
        registry::register(&entry).map_err(io_err(format!("registering lab '{}'", config.name)))?;
        // From here on, a failure must undo what was made.
        let mut made = Vec::new();
        let built = graph::build(
            topology,
            Shape::File(config),
            seed,
            traces,
            (entry, &addrs),
            &mut made,
        );
        if built.is_err() {
            for ns in made {
                let _ = NetNs::delete(&ns);
            }
            registry::unregister(&config.name);
        }
        built
    }
}

fn server_addrs() -> (IpAddr, IpAddr) {
    (
        IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 1)),
    )
}

fn client_addrs(k: u16) -> (IpAddr, IpAddr) {
    (
        IpAddr::V4(Ipv4Addr::new(10, 77, 1, k as u8)),
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 1, k)),
    )
}

/// A dumbbell as the topology `lab topology` prints for it: hosts server and its
/// clients, router r, link 0 the bottleneck, link k client k's access link.
fn as_topology(config: &LabConfig) -> Result<Topology, LabError> {
    let file = config.dumbbell().topology_file().map_err(LabError::Specs)?;
    file.parse()
        .map_err(|e| LabError::Name(format!("the dumbbell as a topology: {e}")))
}
