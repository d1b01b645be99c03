//! The guide runs as written. In README.md and docs/*.md, a line of a code block that
//! starts with a prompt is a command, and the lines after it, up to the next prompt or
//! the block's end, are what it prints:
//!
//! - `$ CMD` runs in CI: as root, in the page's own temporary directory (with
//!   `examples/` in it), in a network namespace of its own (its loopback is the page's),
//!   with this build's `tcplab` first on PATH; the commands of a page run in order, in
//!   one directory, so a later one reads what an earlier one wrote. `nobody$ CMD` runs
//!   so as user nobody. `WORD$ CMD` is a command on another machine (`client$`): shown,
//!   parsed, not run.
//! - It must succeed, unless what it prints ends in an error line (`tcplab: …`): then it
//!   must fail, and an error shown alone must be exactly as shown, figures included. A
//!   command sent to the background (`… &`) is not checked; the page's background
//!   commands are ended after its last command.
//! - Its output is compared line by line with what the page shows: every measured figure (a
//!   number, with its unit if it has one: `27.1 Mbit/s`, `976 KiB`, `seed 8785…`,
//!   `qs9203`) matches any figure, runs of spaces match any run, a word's trailing `s`
//!   is optional (`1 run`, `2 runs`), `…` stands for any text, and a line of `…` alone
//!   for any lines; the page's directory prints as `/home/me`. Everything else must be
//!   as shown.
//!
//! Besides, every `tcplab` command of every code block (`$`-lines and `sh` blocks alike)
//! must parse: it runs with `--help` added, which clap reaches only after reading every
//! flag and value before it.

use crate::support;

use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use regex::Regex;
use tcplab_sys::netns::privileged_or_skip;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// How the page's directory prints in the guide.
const SHOWN_HOME: &str = "/home/me";
/// At most this long for a page's commands.
const PAGE_TIMEOUT: Duration = Duration::from_secs(300);

/// Who runs a command.
#[derive(Debug, Clone, PartialEq)]
enum Prompt {
    Root,
    Nobody,
    /// Another machine: not run.
    Elsewhere(String),
}

/// A command the guide shows, and what it shows it printing.
#[derive(Debug)]
struct Shown {
    page: String,
    /// 1-based line of the prompt.
    line: usize,
    prompt: Prompt,
    command: String,
    output: Vec<String>,
}

impl Shown {
    fn place(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }

    /// The command without its trailing comment and `&`.
    fn body(&self) -> &str {
        let code = without_comment(&self.command).trim_end();
        match code.strip_suffix('&') {
            Some(rest) if !rest.ends_with('&') => rest.trim_end(),
            _ => code,
        }
    }

    fn background(&self) -> bool {
        self.body() != without_comment(&self.command).trim_end()
    }

    /// The guide shows it failing: its last line is an error as tcplab prints them.
    fn fails(&self) -> bool {
        self.output
            .last()
            .is_some_and(|l| l.starts_with("tcplab: "))
    }
}

/// A shell line up to its comment: a `#` starting a word outside quotes.
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return &line[..i],
            _ => {}
        }
        previous = c;
    }
    line
}

/// A fenced code block: its info string and its lines with their numbers.
struct Block {
    lang: String,
    lines: Vec<(usize, String)>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match (open.take(), line.strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(Block {
                    lang: lang.trim().to_owned(),
                    lines: Vec::new(),
                })
            }
            (Some(block), Some(_)) => blocks.push(block),
            (Some(mut block), None) => {
                block.lines.push((i + 1, line.to_owned()));
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    blocks
}

fn prompt_line() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^(?:([a-z][a-z0-9@._-]*))?\$ (.*)$").unwrap())
}

/// The commands shown in `page`'s code blocks, in order.
fn shown(page: &str, text: &str) -> Vec<Shown> {
    let mut all = Vec::new();
    for block in blocks(text) {
        let mut lines = block.lines.into_iter();
        let mut current: Option<Shown> = None;
        while let Some((n, line)) = lines.next() {
            let Some(found) = prompt_line().captures(&line) else {
                if let Some(shown) = current.as_mut() {
                    shown.output.push(line);
                }
                continue;
            };
            all.extend(current.take());
            let mut command = found[2].to_owned();
            // A line ending in a backslash goes on.
            while command.ends_with('\\') {
                let Some((_, next)) = lines.next() else { break };
                command.push('\n');
                command.push_str(&next);
            }
            let prompt = match found.get(1).map(|m| m.as_str()) {
                None => Prompt::Root,
                Some("nobody") => Prompt::Nobody,
                Some(other) => Prompt::Elsewhere(other.to_owned()),
            };
            current = Some(Shown {
                page: page.to_owned(),
                line: n,
                prompt,
                command,
                output: Vec::new(),
            });
        }
        all.extend(current);
    }
    for shown in &mut all {
        while shown.output.last().is_some_and(|l| l.trim().is_empty()) {
            shown.output.pop();
        }
    }
    all
}

/// A shell line's commands: its text split at `&&`, `||`, `|`, `;` and `&` outside
/// quotes, before its comment; each with whether it expands something (`$` or a
/// backquote outside single quotes), which leaves its words unknown here.
fn segments(line: &str) -> Vec<(String, bool)> {
    let mut segments = vec![(String::new(), false)];
    let mut quote = None;
    for c in without_comment(line).chars() {
        let (text, expands) = segments.last_mut().unwrap();
        match (quote, c) {
            (None, '&' | '|' | ';') => {
                // `2>&1` is a redirection, not a separator.
                if c == '&' && text.ends_with('>') {
                    text.push(c);
                } else if !text.trim().is_empty() {
                    segments.push((String::new(), false));
                }
                continue;
            }
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None | Some('"'), '$' | '`') => *expands = true,
            _ => {}
        }
        text.push(c);
    }
    segments
}

/// The `tcplab` invocations in a shell command line, as words (`tcplab` dropped), without
/// redirections; a command with shell expansions is left out.
fn invocations(line: &str) -> Vec<Vec<String>> {
    let redirection = Regex::new(r"^[0-9]?(>>?|<)(.*)$").unwrap();
    let mut found = Vec::new();
    for (text, expands) in segments(line) {
        let Some(words) = shlex::split(&text) else {
            continue;
        };
        if expands
            || !words
                .first()
                .is_some_and(|w| w == "tcplab" || w.ends_with("/tcplab"))
        {
            continue;
        }
        let mut args = Vec::new();
        let mut words = words.into_iter().skip(1);
        while let Some(word) = words.next() {
            match redirection.captures(&word) {
                // `> FILE`: the file is the next word.
                Some(r) if r[2].is_empty() => {
                    words.next();
                }
                Some(_) => {}
                None => args.push(word),
            }
        }
        found.push(args);
    }
    found
}

/// What a figure in the guide may be in the output: a number (digits, a decimal point,
/// a sign) and its unit where it has one.
const FIGURE: &str = r"[-+]?[0-9]+(?:[.,][0-9]+)*(?: ?(?:%|[kKMGT]?i?B|[KMGT]|[kMGT]?bit/s|[kmgt]?bit|[kmgt]bps|bdp|µs|us|ms|ns|s|h|m|pkts))?";

fn figure_or_text() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(&format!(
            r"(?P<figure>{FIGURE})(?:\b|$)|(?P<any>…)|(?P<space>\s+)|(?P<word>[A-Za-z]+)|(?P<other>.)"
        ))
        .unwrap()
    })
}

/// A line the guide shows, as the pattern the output's line must match; its figures
/// as shown where `exact`, else any figure.
fn pattern(shown: &str, exact: bool) -> Regex {
    let mut re = String::from("^");
    for token in figure_or_text().captures_iter(shown.trim()) {
        if token.name("figure").is_some() && !exact {
            re.push_str(&format!("(?:{FIGURE})"));
        } else if token.name("any").is_some() {
            re.push_str(".*");
        } else if token.name("space").is_some() {
            re.push_str(r"\s+");
        } else if let Some(word) = token.name("word") {
            let word = word.as_str();
            re.push_str(&regex::escape(word.strip_suffix('s').unwrap_or(word)));
            re.push_str("s?");
        } else {
            re.push_str(&regex::escape(&token[0]));
        }
    }
    re.push('$');
    Regex::new(&re).unwrap_or_else(|e| panic!("{shown:?}: {e}"))
}

/// Whether `actual` is what `shown` shows, a line of `…` standing for any lines.
fn matches(shown: &[String], actual: &[&str], exact: bool) -> bool {
    let patterns: Vec<Option<Regex>> = shown
        .iter()
        .map(|l| (l.trim() != "…").then(|| pattern(l, exact)))
        .collect();
    // can[i][j]: patterns[i..] match actual[j..].
    let mut can = vec![vec![false; actual.len() + 1]; patterns.len() + 1];
    can[patterns.len()][actual.len()] = true;
    for i in (0..patterns.len()).rev() {
        for j in (0..=actual.len()).rev() {
            can[i][j] = match &patterns[i] {
                None => can[i + 1][j] || (j < actual.len() && can[i][j + 1]),
                Some(p) => j < actual.len() && p.is_match(actual[j].trim()) && can[i + 1][j + 1],
            };
        }
    }
    can[0][0]
}

/// The first shown line that no output line in order matches: a hint for the message.
fn first_mismatch(shown: &[String], actual: &[&str], exact: bool) -> Option<String> {
    let mut at = 0;
    for line in shown.iter().filter(|l| l.trim() != "…") {
        let p = pattern(line, exact);
        match actual[at..].iter().position(|a| p.is_match(a.trim())) {
            Some(k) => at += k + 1,
            None => return Some(line.clone()),
        }
    }
    None
}

fn read_page(page: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(page))
        .unwrap_or_else(|e| panic!("reading {page}: {e}"))
}

/// README.md and every page of docs/.
fn pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".into());
    pages
}

fn tcplab_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tcplab"))
        .parent()
        .unwrap()
        .to_owned()
}

/// What ends a page: every process left in its network namespace (a background server
/// and whatever it started) is stopped, then waited for.
const END_OF_PAGE: &str = r#"here=$(readlink /proc/$$/ns/net)
for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    [ "$pid" != $$ ] && [ "$(readlink "$proc/ns/net" 2>/dev/null)" = "$here" ] && kill "$pid" 2>/dev/null
done
wait
"#;

/// A page's commands as one bash script: each to its own files of output and status,
/// what is left running ended at the end.
fn script(commands: &[&Shown], dir: &Path) -> String {
    let mut script = String::from("ip link set lo up\n");
    for (k, shown) in commands.iter().enumerate() {
        let file = dir.join(format!(".doc/command-{k}"));
        std::fs::write(&file, format!("{}\n", shown.body())).unwrap();
        let run = match shown.prompt {
            Prompt::Nobody => format!(
                "setpriv --reuid=65534 --regid=65534 --clear-groups -- bash {}",
                file.display()
            ),
            _ => format!("bash {}", file.display()),
        };
        let out = dir.join(format!(".doc/output-{k}"));
        if shown.background() {
            // A server: on once it listens (one more listening socket), in 10 s at most.
            let _ = writeln!(
                script,
                "listening=$(ss -Htln | wc -l)\n{run} > {} 2>&1 &\n\
                 for _ in $(seq 100); do \
                 [ \"$(ss -Htln | wc -l)\" -gt \"$listening\" ] && break; sleep 0.1; done",
                out.display()
            );
        } else {
            let _ = writeln!(
                script,
                "{run} > {} 2>&1\necho $? > {}",
                out.display(),
                dir.join(format!(".doc/status-{k}")).display()
            );
        }
    }
    script.push_str(END_OF_PAGE);
    script
}

/// Runs the page's `$` and `nobody$` commands in order and checks each against what the
/// page shows; panics naming every command that differs.
fn check_page(page: &str, machine: fn() -> support::Machine) {
    let text = read_page(page);
    let all = shown(page, &text);
    let run: Vec<&Shown> = all
        .iter()
        .filter(|s| !matches!(s.prompt, Prompt::Elsewhere(_)))
        .collect();
    if run.is_empty() {
        return;
    }
    if !privileged_or_skip(&format!("docs {page}")) {
        return;
    }
    let _machine = machine();
    // A figure's words can follow the load too (a starved BBR sender makes the verdict
    // the window's, not the link's): a page whose output alone differs runs again.
    support::one_of_three_tries(page, || run_page(page, &run));
}

/// Runs a page's commands in a directory of their own and checks each one's exit status
/// (outright) and output (`Err`, with the directory kept).
fn run_page(page: &str, run: &[&Shown]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    // Nobody works in it as well as root.
    if run.iter().any(|s| s.prompt == Prompt::Nobody) {
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    }
    std::fs::create_dir(dir.path().join(".doc")).unwrap();
    std::os::unix::fs::symlink(
        Path::new(ROOT).join("examples"),
        dir.path().join("examples"),
    )
    .unwrap();
    let script_file = dir.path().join(".doc/page.sh");
    std::fs::write(&script_file, script(run, dir.path())).unwrap();
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        tcplab_dir().display()
    );
    let started = Instant::now();
    // In a process group of its own, to end all of it should it hang.
    let mut child = Command::new("unshare")
        .process_group(0)
        .arg("--net")
        .arg("bash")
        .arg(&script_file)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", &path)
        .env("HOME", dir.path())
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running unshare (util-linux)");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PAGE_TIMEOUT {
            // SAFETY: a signal to the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("{page}: its commands took more than {PAGE_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{page}: the page's script failed: {status}"
    );
    println!(
        "{page}: {} commands in {:.1} s",
        run.len(),
        started.elapsed().as_secs_f64()
    );
    let home = dir.path().display().to_string();
    let mut failures = Vec::new();
    let mut outright = false;
    for (k, shown) in run.iter().enumerate() {
        if shown.background() {
            continue;
        }
        let read = |name: &str| {
            std::fs::read_to_string(dir.path().join(format!(".doc/{name}-{k}"))).unwrap_or_default()
        };
        let output = read("output").replace(&home, SHOWN_HOME);
        let status: i32 = read("status").trim().parse().unwrap_or(-1);
        let mut actual: Vec<&str> = output.lines().collect();
        while actual.last().is_some_and(|l| l.trim().is_empty()) {
            actual.pop();
        }
        let mut wrong = Vec::new();
        let status_differs = shown.fails() == (status == 0);
        if status_differs {
            wrong.push(format!(
                "exit status {status}, where the page shows it {}",
                if shown.fails() {
                    "failing"
                } else {
                    "succeeding"
                }
            ));
        }
        // An error alone says what the page shows, figures and all.
        let exact = shown.fails() && shown.output.iter().all(|l| l.starts_with("tcplab: "));
        let output_differs = !matches(&shown.output, &actual, exact);
        if output_differs {
            wrong.push(format!(
                "output differs{}",
                first_mismatch(&shown.output, &actual, exact)
                    .map(|l| format!(" (first unmatched shown line: {l:?})"))
                    .unwrap_or_default()
            ));
        }
        // Neither an exit status nor an error's exact words follow the load.
        outright |= status_differs || (exact && output_differs);
        if !wrong.is_empty() {
            failures.push(format!(
                "{}: $ {}\n  {}\n  shown:\n    {}\n  printed:\n    {}",
                shown.place(),
                shown.command,
                wrong.join("; "),
                shown.output.join("\n    "),
                actual.join("\n    ")
            ));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    let kept = dir.keep();
    let said = format!(
        "\n{}\n\n(the page's directory is kept: {})",
        failures.join("\n\n"),
        kept.display()
    );
    assert!(!outright, "{said}");
    Err(said)
}

/// The pages whose shown output holds a figure's words (a verdict, a limit) take the
/// machine alone; those that show messages, file names and counts only run among others.
macro_rules! pages {
    (
        alone: { $($test:ident: $page:literal,)* }
        among_others: { $($shared_test:ident: $shared_page:literal,)* }
    ) => {
        $(
            #[test]
            fn $test() {
                check_page($page, support::alone);
            }
        )*
        $(
            #[test]
            fn $shared_test() {
                check_page($shared_page, support::among_others);
            }
        )*
        const CHECKED: &[&str] = &[$($page,)* $($shared_page),*];
    };
}

pages! {
    alone: {
    readme: "README.md",
    cluster: "docs/cluster.md",
    development: "docs/development.md",
    explain: "docs/explain.md",
    internals: "docs/internals.md",
    iperf3: "docs/iperf3.md",
    json: "docs/json.md",
    paths: "docs/paths.md",
    performance: "docs/performance.md",
    rootless: "docs/rootless.md",
    run: "docs/run.md",
    security: "docs/security.md",
    studies: "docs/studies.md",
    topologies: "docs/topologies.md",
    udp_and_pacing: "docs/udp-and-pacing.md",
    watch: "docs/watch.md",
    }
    among_others: {
    experiments: "docs/experiments.md",
    reports: "docs/reports.md",
    troubleshooting: "docs/troubleshooting.md",
    }
}

/// Every page of the guide has its test above.
#[test]
fn every_page_is_checked() {
    let mut checked = CHECKED.to_vec();
    checked.sort_unstable();
    assert_eq!(pages(), checked);
}

/// Every `tcplab` command in a code block of the guide parses: flags, values and
/// subcommands as this build reads them.
#[test]
fn every_command_in_the_guide_parses() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read_page(&page);
        // What the guide shows failing may fail to parse.
        let mut lines: Vec<(usize, String)> = shown(&page, &text)
            .into_iter()
            .filter(|s| !s.fails())
            .map(|s| (s.line, s.command))
            .collect();
        for block in blocks(&text).into_iter().filter(|b| b.lang == "sh") {
            lines.extend(block.lines);
        }
        for (n, line) in lines {
            for words in invocations(&line) {
                let mut args = words.clone();
                let at = args.iter().position(|w| w == "--").unwrap_or(args.len());
                args.insert(at, "--help".into());
                let out = Command::new(env!("CARGO_BIN_EXE_tcplab"))
                    .args(&args)
                    .output()
                    .unwrap();
                checked += 1;
                if !out.status.success() {
                    wrong.push(format!(
                        "{page}:{n}: tcplab {}: {}",
                        words.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            }
        }
    }
    println!("{checked} tcplab commands parsed");
    assert!(checked > 60, "only {checked} commands found");
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The matcher itself: figures, spaces, plurals and `…`, and what it does not forgive.
#[test]
fn the_matcher_forgives_measured_figures_only() {
    let lines = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    let shown = lines("run 1: 27.1 Mbit/s received by 1 TCP flow\n…\nreport: x-report/index.html (6 charts; open it)");
    assert!(matches(
        &shown,
        &[
            "run 12: 976 kbit/s  received by 1 TCP flow",
            "a",
            "b",
            "report: x-report/index.html (1 chart; open it)"
        ],
        false
    ));
    assert!(matches(
        &shown,
        &[
            "run 1: 3 Gbit/s received by 1 TCP flow",
            "report: x-report/index.html (2 charts; open it)"
        ],
        false
    ));
    assert!(!matches(
        &shown,
        &[
            "run 1: 3 Gbit/s received by 2 UDP flows",
            "report: x-report/index.html (2 charts; open it)"
        ],
        false
    ));
    assert!(!matches(
        &shown,
        &["run 1: 3 Gbit/s received by 1 TCP flow"],
        false
    ));
    assert!(!matches(
        &shown,
        &[
            "run 1: 3 Gbit/s received by 1 TCP flow",
            "report: x-report/index.html (2 charts; open it)",
            "more"
        ],
        false
    ));
    assert!(matches(
        &lines("lab qs9203: path \"rtt 20ms seed 7934\""),
        &["lab qs17: path \"rtt 0.5ms seed 1\""],
        false
    ));
    assert!(!matches(
        &lines("lab qs9203: path \"rtt 20ms\""),
        &["lab qs17: path \"rate 20ms\""],
        false
    ));
    assert!(matches(
        &lines("1  4  rtt=20ms buffer=64K"),
        &["6  0  rtt=0.2ms buffer=4M"],
        false
    ));
    assert!(matches(
        &lines("rtt    buffer  n  mean  …"),
        &["rtt buffer n mean median"],
        false
    ));
    assert!(!matches(
        &lines("tcplab: bad.toml: line 12"),
        &["tcplab: bad.toml: line twelve"],
        false
    ));
    // An error's figures are its own.
    let error = lines("tcplab: bad.toml: line 12, column 19: 2.00 Gbit/s");
    assert!(matches(
        &error,
        &["tcplab: bad.toml: line 12, column 19: 2.00 Gbit/s"],
        true
    ));
    assert!(!matches(
        &error,
        &["tcplab: bad.toml: line 12, column 9: 2.00 Gbit/s"],
        true
    ));
    assert!(!matches(
        &error,
        &["tcplab: bad.toml: line 12, column 19: 2 Gbit/s"],
        true
    ));
    assert_eq!(
        invocations(
            "tcplab run -t 3 --db a.db && tcplab explain --db a.db | head -2 > x 2>&1 # note"
        ),
        [
            vec!["run", "-t", "3", "--db", "a.db"],
            vec!["explain", "--db", "a.db"]
        ]
    );
    assert_eq!(
        invocations("tcplab --netns x shell -- sh -c 'ping $H' &  tcplab lab gc"),
        [
            vec!["--netns", "x", "shell", "--", "sh", "-c", "ping $H"],
            vec!["lab", "gc"]
        ]
    );
    assert_eq!(
        invocations("tcplab sweep \"$STUDY\" --shard 1/2"),
        Vec::<Vec<String>>::new(),
        "expansions leave the line out"
    );
    assert_eq!(
        invocations("./target/release/tcplab quickstart 2> err.txt"),
        [vec!["quickstart"]]
    );
}
