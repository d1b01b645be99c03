//! docs/cluster.md's Slurm job array, run as written on a one-node Slurm cluster that
//! the test starts on this machine (Debian's slurm-wlm and munge: munged, slurmctld and
//! slurmd in the foreground, their configuration in a temporary directory). Without
//! them it skips, and fails in CI (`.ci/run` installs them).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use tcplab_sys::netns::{in_ci, privileged_or_skip};

/// The daemons of a one-node cluster, stopped when dropped.
struct Cluster {
    daemons: Vec<Child>,
    dir: PathBuf,
    conf: PathBuf,
}

const PROGRAMS: [&str; 5] = ["munged", "slurmctld", "slurmd", "sbatch", "sinfo"];

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Cluster {
    /// munged, then slurmctld and slurmd for this host, in `dir`.
    fn start(dir: &Path) -> Cluster {
        let host = text(&output(Command::new("hostname").arg("-s")).stdout)
            .trim()
            .to_owned();
        // Two parts at a time on this machine's CPUs (config_overrides: as configured).
        let cpus = 2 * std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        let d = dir.display();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        // munged refuses a key others can read and a socket directory others can write.
        let key: Vec<u8> = (0..1024).map(|_| rand::random::<u8>()).collect();
        write_private(&dir.join("munge.key"), &key);
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=tcplabci\n\
                 SlurmctldHost={host}\n\
                 SlurmctldPort={ctld}\n\
                 SlurmdPort={slurmd}\n\
                 AuthType=auth/munge\n\
                 AuthInfo=socket={d}/munge.socket\n\
                 CredType=cred/munge\n\
                 SlurmUser=root\n\
                 SlurmdUser=root\n\
                 StateSaveLocation={d}/state\n\
                 SlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\n\
                 SlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\n\
                 SlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 JobCompType=jobcomp/none\n\
                 MpiDefault=none\n\
                 SchedulerType=sched/builtin\n\
                 SelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_CPU\n\
                 ReturnToService=2\n\
                 SlurmdParameters=config_overrides\n\
                 NodeName={host} CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                ctld = support::free_port(),
                slurmd = support::free_port(),
            ),
        )
        .unwrap();
        let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).unwrap();
        let spawn = |cmd: &mut Command, name: &str| {
            cmd.stdout(log(&format!("{name}.out")))
                .stderr(log(&format!("{name}.err")))
                .spawn()
                .unwrap_or_else(|e| panic!("starting {name}: {e}"))
        };
        let mut cluster = Cluster {
            daemons: Vec::new(),
            dir: dir.to_owned(),
            conf: conf.clone(),
        };
        cluster.daemons.push(spawn(
            Command::new("munged")
                .args(["--foreground", "--force"])
                .arg(format!("--socket={d}/munge.socket"))
                .arg(format!("--key-file={d}/munge.key"))
                .arg(format!("--log-file={d}/log/munged.log"))
                .arg(format!("--pid-file={d}/munged.pid"))
                .arg(format!("--seed-file={d}/munged.seed")),
            "munged",
        ));
        cluster.wait_for("munged's socket", || dir.join("munge.socket").exists());
        cluster.daemons.push(spawn(
            Command::new("slurmctld")
                .args(["-D", "-c", "-i", "-f"])
                .arg(&conf),
            "slurmctld",
        ));
        cluster.daemons.push(spawn(
            Command::new("slurmd").args(["-D", "-f"]).arg(&conf),
            "slurmd",
        ));
        cluster.wait_for("the node to be idle", || {
            let out = cluster.slurm("sinfo").args(["-h", "-o", "%t"]).output();
            out.is_ok_and(|o| text(&o.stdout).trim() == "idle")
        });
        cluster
    }

    /// A Slurm client command that talks to this cluster.
    fn slurm(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    fn wait_for(&self, what: &str, ready: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "waited 30 s for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        let mut all = String::new();
        for entry in std::fs::read_dir(self.dir.join("log")).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            all += &format!("--- {}\n", path.display());
            for line in tail.into_iter().rev() {
                all += line;
                all.push('\n');
            }
        }
        all
    }

    /// `sbatch --parsable ARGS SCRIPT` in `work`, with `tcplab` on the job's PATH and
    /// STUDY naming the quick study: the job's id.
    fn submit(&self, work: &Path, args: &[&str], script: &str) -> String {
        let path = format!(
            "{}:{}",
            Path::new(env!("CARGO_BIN_EXE_tcplab"))
                .parent()
                .unwrap()
                .display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = output(
            self.slurm("sbatch")
                .arg("--parsable")
                .args(args)
                .arg(script)
                .current_dir(work)
                .env("PATH", path)
                .env("STUDY", "quick.toml"),
        );
        assert!(
            out.status.success(),
            "sbatch {args:?} {script}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).trim().to_owned()
    }

    /// Waits for every task of job `id` to end (polling scontrol, quicker than `sbatch
    /// --wait`), asserting each completed; the jobs' logs in `work` are in the message.
    fn wait(&self, work: &Path, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let out = output(self.slurm("scontrol").args(["show", "job", "-o", id]));
            let states: Vec<String> = text(&out.stdout)
                .lines()
                .filter_map(|l| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix("JobState="))
                })
                .map(str::to_owned)
                .collect();
            let running = ["PENDING", "RUNNING", "CONFIGURING", "COMPLETING"];
            if !states.is_empty() && states.iter().all(|s| !running.contains(&s.as_str())) {
                if states.iter().all(|s| s == "COMPLETED") {
                    return;
                }
                panic!("job {id}: {states:?}\n{}\n{}", job_logs(work), self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "job {id} still {states:?} after 300 s\n{}\n{}",
                job_logs(work),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The jobs' own logs (`--output` in the scripts: NAME.out in the work directory).
fn job_logs(work: &Path) -> String {
    std::fs::read_dir(work)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "out"))
        .map(|p| {
            format!(
                "--- {}\n{}",
                p.display(),
                std::fs::read_to_string(&p).unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for daemon in self.daemons.iter_mut().rev() {
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
    }
}

fn write_private(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
}

/// The ```sh block of docs/cluster.md whose second line is `# NAME — …`.
fn script_from_the_guide(name: &str) -> String {
    let guide = include_str!("../../../docs/cluster.md");
    let blocks: Vec<&str> = guide
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    blocks
        .iter()
        .find(|b| {
            b.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with(&format!("# {name} ")))
        })
        .unwrap_or_else(|| panic!("no {name} in docs/cluster.md"))
        .to_string()
}

/// The guide's job array on a quick study of 8 runs (4 points × 2): the parts, then the
/// merge after them, hold exactly the plan, each run once; part 2 lost and resubmitted
/// alone runs as 2 of 8, and the merge runs again.
#[test]
fn the_guides_slurm_job_array_merges_exactly_the_plan() {
    if !privileged_or_skip("slurm") {
        return;
    }
    let on_path = |program: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .any(|dir| dir.join(program).is_file())
    };
    let missing: Vec<&str> = PROGRAMS.into_iter().filter(|p| !on_path(p)).collect();
    if !missing.is_empty() {
        let why = format!("{missing:?} not installed (apt-get install slurm-wlm munge)");
        assert!(!in_ci(), "slurm: {why}");
        eprintln!("SKIP slurm: {why}");
        return;
    }
    let _machine = support::among_others();
    let root = tempfile::tempdir().unwrap();
    // munged wants its directory private; the jobs' directory is the work one.
    let daemons = root.path().join("cluster");
    std::fs::create_dir(&daemons).unwrap();
    std::fs::set_permissions(
        &daemons,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let cluster = Cluster::start(&daemons);
    std::fs::write(
        work.join("quick.toml"),
        "name = \"quick\"\nrepetitions = 2\nduration = \"1s\"\n\
         path = \"rtt 5ms rate 50mbit queue 1bdp\"\n\
         [[axis]]\nkey = \"flow.window\"\nvalues = [\"16K\", \"64K\", \"256K\", \"1M\"]\n",
    )
    .unwrap();
    for name in ["study.sbatch", "merge.sbatch"] {
        std::fs::write(work.join(name), script_from_the_guide(name)).unwrap();
    }

    // As the guide says: the array, and the merge after it.
    let started = Instant::now();
    let study = cluster.submit(&work, &[], "study.sbatch");
    let after = format!("--dependency=afterok:{study}");
    let merge = cluster.submit(&work, &[&after], "merge.sbatch");
    cluster.wait(&work, &study);
    cluster.wait(&work, &merge);
    println!(
        "the array and the merge: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let merged = work.join("results/quick.db");
    let assert_the_plan = |what: &str| {
        let said = std::fs::read_to_string(work.join("tcplab-merge.out")).unwrap();
        assert!(
            said.contains("merged 8 databases") && said.contains("8 done, 0 failed, 0 to run"),
            "{what}: {said}"
        );
        assert!(!said.contains("twice"), "{what}: {said}");
        let store = tcplab_store::Store::open_to_read(&merged).unwrap();
        let experiments = store.experiments().unwrap();
        assert_eq!(experiments.len(), 1, "{what}");
        let plan = store.plan(experiments[0].id).unwrap();
        assert_eq!(plan.len(), 8, "{what}");
        let mut runs: Vec<(u32, u32)> = plan
            .iter()
            .map(|r| {
                assert_eq!(r.status, tcplab_store::PlanStatus::Done, "{what}: {r:?}");
                (r.run.point, r.run.repetition)
            })
            .collect();
        runs.sort();
        let wanted: Vec<(u32, u32)> = (0..4).flat_map(|p| [(p, 0), (p, 1)]).collect();
        assert_eq!(runs, wanted, "{what}: every point × repetition once");
        assert_eq!(store.list_runs().unwrap().len(), 8, "{what}: each run once");
    };
    assert_the_plan("the first merge");
    for k in 1..=8 {
        let log = std::fs::read_to_string(work.join(format!("tcplab-study-{k}.out"))).unwrap();
        assert!(
            log.contains(&format!("(shard {k}/8: 1 of them)")),
            "part {k}: {log}"
        );
    }

    // Part 2 lost: resubmitted alone, it is still part 2 of 8; merged again.
    let part = work.join("results/quick/part-2.db");
    std::fs::remove_file(&part).unwrap();
    let again = cluster.submit(&work, &["--array=2"], "study.sbatch");
    cluster.wait(&work, &again);
    let log = std::fs::read_to_string(work.join("tcplab-study-2.out")).unwrap();
    assert!(log.contains("(shard 2/8: 1 of them)"), "{log}");
    assert!(part.exists());
    let merge = cluster.submit(&work, &[], "merge.sbatch");
    cluster.wait(&work, &merge);
    assert_the_plan("the merge run again");
}
