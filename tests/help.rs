//! The help and the README show what the commands really print, and the help reads well on an
//! 80-column terminal.

use std::process::{Command, Output};

mod common;
use common::{code, stdout};

/// `spindle ARGS --help` rendered for a terminal `columns` wide (clap reads COLUMNS when its
/// output is not a terminal, as here).
fn help(args: &[&str], columns: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", columns.to_string())
        .output()
        .expect("spindle runs");
    assert_eq!(code(&out), 0, "{args:?}");
    stdout(&out)
}

/// The subcommands listed under "Commands:" in a help text, but `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A name sits two columns in; deeper lines continue a wrapped description.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// Every help text: the top level, each subcommand, each `stats` calculator.
fn every_help() -> Vec<Vec<String>> {
    let mut all = vec![vec![]];
    for name in subcommands(&help(&[], 80)) {
        for sub in subcommands(&help(&[name.as_str()], 80)) {
            all.push(vec![name.clone(), sub]);
        }
        all.push(vec![name]);
    }
    assert!(all.len() >= 10, "{all:?}");
    all
}

#[test]
fn every_help_fits_80_columns_without_split_words_or_ragged_paragraphs() {
    for path in every_help() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        for columns in [80, 100] {
            let text = help(&args, columns);
            let lines: Vec<&str> = text.lines().collect();
            for line in &lines {
                assert!(
                    line.chars().count() <= columns,
                    "spindle {args:?} --help at {columns} columns: {} columns in\n{line}",
                    line.chars().count()
                );
            }
            // A paragraph wrapped by clap is greedy: the first word of a line never fits at the
            // end of the line before it. A hand-wrapped paragraph re-wrapped at a narrower width
            // breaks that rule ("…about the" / "median of r, …"). Table and example lines are
            // indented, and are their own lines on purpose.
            for pair in lines.windows(2) {
                let (line, next) = (pair[0], pair[1]);
                let prose = |l: &str| !l.is_empty() && !l.starts_with(' ');
                if prose(line) && prose(next) {
                    let word = next.split_whitespace().next().unwrap_or("");
                    assert!(
                        line.chars().count() + 1 + word.chars().count() > columns,
                        "spindle {args:?} --help at {columns} columns: '{word}' would fit after\n{line}"
                    );
                }
            }
        }
        // The same words at either width: nothing was split.
        let words = |columns| {
            let mut w: Vec<String> = help(&args, columns)
                .split_whitespace()
                .map(String::from)
                .collect();
            w.sort();
            w
        };
        assert_eq!(words(80), words(100), "spindle {args:?} --help");
    }
}

/// A `$ spindle …` line of an example, with what the documentation says it prints.
struct Example {
    command: String,
    /// The lines shown after the command (empty: not shown).
    output: Vec<String>,
    /// The exit code a comment promises ("# … (exit 2)").
    exit: Option<i32>,
    /// Decimal numbers the comment quotes ("# … log level -3.01…"): they must be printed.
    quoted: Vec<String>,
    /// Where it was found, for failure messages.
    place: String,
}

/// Examples in `text`: lines `$ spindle stats …` (or `$ yes 0 | spindle stats …`), each
/// followed by the output it shows, up to the next `$` line, a blank line or the end of a code
/// block. Lines are compared after their common indentation is removed.
fn examples(text: &str, place: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_start();
        let indent = raw.len() - line.len();
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        if !(command.starts_with("spindle stats ") || command.starts_with("yes 0 | spindle stats "))
        {
            continue;
        }
        let (command, comment) = match command.find(" #") {
            Some(at) => (command[..at].trim(), &command[at + 2..]),
            None => (command.trim(), ""),
        };
        let output = lines[i + 1..]
            .iter()
            .take_while(|l| {
                let t = l.trim_start();
                !t.is_empty() && !t.starts_with('$') && !t.starts_with("```")
            })
            .map(|l| l.get(indent..).unwrap_or("").to_string())
            .collect();
        let exit = comment
            .split("exit ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok());
        let quoted = comment
            .split_whitespace()
            .filter(|w| w.contains('.') && w.parse::<f64>().is_ok())
            .map(String::from)
            .collect();
        found.push(Example {
            command: command.to_string(),
            output,
            exit,
            quoted,
            place: format!("{place} line {}", i + 1),
        });
    }
    found
}

fn run(example: &Example) -> Output {
    let (input, command) = match example.command.strip_prefix("yes 0 | ") {
        Some(rest) => (Some("0\n".repeat(100_000)), rest),
        None => (None, example.command.as_str()),
    };
    let words: Vec<&str> = command.split_whitespace().skip(1).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(&words)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spindle runs");
    let stdin = child.stdin.take().unwrap();
    if let Some(text) = input {
        use std::io::Write;
        let mut stdin = stdin;
        // The filter stops reading once it decides: ignore the broken pipe.
        let _ = stdin.write_all(text.as_bytes());
    }
    child.wait_with_output().unwrap()
}

/// Runs every example that promises something (output, an exit code, a figure) and checks it.
fn check(examples: &[Example]) -> usize {
    let mut checked = 0;
    for e in examples {
        if e.output.is_empty() && e.exit.is_none() && e.quoted.is_empty() {
            continue;
        }
        let out = run(e);
        let printed = stdout(&out);
        if !e.output.is_empty() {
            let shown: Vec<&str> = e.output.iter().map(String::as_str).collect();
            let real: Vec<&str> = printed.lines().collect();
            assert_eq!(real, shown, "{}: {}", e.place, e.command);
        }
        if let Some(exit) = e.exit {
            assert_eq!(code(&out), exit, "{}: {}", e.place, e.command);
        }
        for figure in &e.quoted {
            assert!(
                printed.contains(figure.as_str()),
                "{}: {} does not print {figure}:\n{printed}",
                e.place,
                e.command
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn examples_in_the_help_print_what_they_show() {
    let mut checked = 0;
    for path in every_help() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        checked += check(&examples(
            &help(&args, 100),
            &format!("spindle {args:?} --help"),
        ));
    }
    // stats csm (two) and beta-icdf (two).
    assert!(checked >= 4, "{checked} examples checked");
}

#[test]
fn examples_in_the_readme_print_what_they_show() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let found = examples(&readme, "README.md");
    let checked = check(&found);
    // csm (two), beta-icdf (two), the stream of zeros, power (two).
    assert!(
        checked >= 7,
        "{checked} of {} examples checked",
        found.len()
    );
}
