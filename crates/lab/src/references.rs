//! The documents whose figures the lab re-measures, named by what they are.

use crate::results::Reference;

/// A reference as the catalogue declares it (borrowed strings, turned into a
/// [`Reference`] in results).
#[derive(Clone, Copy, Debug)]
pub struct Doc {
    pub id: &'static str,
    pub title: &'static str,
    pub author: &'static str,
    pub year: Option<u32>,
    pub venue: &'static str,
    pub machine: &'static str,
}

impl Doc {
    pub fn to_reference(&self) -> Reference {
        Reference {
            id: self.id.into(),
            title: self.title.into(),
            author: self.author.into(),
            year: self.year,
            venue: self.venue.into(),
            machine: self.machine.into(),
        }
    }

    /// "Thompson 2011": the surname and year, where a full citation stands nearby.
    pub fn short(&self) -> String {
        let surname = self.author.split_whitespace().last().unwrap_or(self.author);
        match self.year {
            Some(y) => format!("{surname} {y}"),
            None => surname.to_string(),
        }
    }

    /// "Martin Thompson, “Single Writer Principle” (Mechanical Sympathy, 2011)".
    pub fn cite(&self) -> String {
        match self.year {
            Some(y) => format!("{}, “{}” ({}, {y})", self.author, self.title, self.venue),
            None => format!(
                "{}, “{}” ({}, undated)",
                self.author, self.title, self.venue
            ),
        }
    }
}

pub const SINGLE_WRITER: Doc = Doc {
    id: "thompson-2011-single-writer",
    title: "Single Writer Principle",
    author: "Martin Thompson",
    year: Some(2011),
    venue: "Mechanical Sympathy blog",
    machine: "2.4 GHz Intel Westmere, Java; 500 million increments",
};

pub const AFFINITY: Doc = Doc {
    id: "thompson-2011-affinity",
    title: "Processor Affinity - Part 1",
    author: "Martin Thompson",
    year: Some(2011),
    venue: "Mechanical Sympathy blog",
    machine: "not stated; two Java threads exchanging IP multicast messages on a dummy interface",
};

pub const PREEMPTION_BARRIERS: Doc = Doc {
    id: "khuong-2019-preemption",
    title: "Preemption Is GC for Memory Reordering",
    author: "Paul Khuong",
    year: Some(2019),
    venue: "pvk.ca",
    machine: "4-socket Intel Xeon E5-46xx, Linux 4.16",
};

pub const POLYSEMIC_NULL: Doc = Doc {
    id: "khuong-2018-rseq",
    title: "Restartable Sequences with the Polysemic Null Segment Selector",
    author: "Paul Khuong",
    year: Some(2018),
    venue: "pvk.ca",
    machine: "Linux 4.14/x86-64 (no per-CPU figures: the post argues the mechanism)",
};

pub const MUTEXES: Doc = Doc {
    id: "skarupke-2020-mutexes",
    title: "Measuring Mutexes, Spinlocks and how Bad the Linux Scheduler Really is",
    author: "Malte Skarupke",
    year: Some(2020),
    venue: "probablydance.com",
    machine: "AMD Ryzen 7 1700 (8 cores, 16 hardware threads), Linux CFS, 16 threads",
};

pub const SPAWN: Doc = Doc {
    id: "micay-2013-mn-threading",
    title: "The future of M:N threading",
    author: "Daniel Micay",
    year: Some(2013),
    venue: "rust-dev mailing list",
    machine: "not stated (a multi-core Linux machine); 100 000 threads",
};

pub const SAMPLING: Doc = Doc {
    id: "slootmaekers-incubaid-sampling",
    title: "Share your mistakes: adventures in optimization",
    author: "Romain Slootmaekers",
    year: None,
    venue: "Incubaid blog",
    machine: "not stated; OCaml, p = 10 000, 100 000 samples per size",
};

pub const PRINTING_INTEGERS: Doc = Doc {
    id: "khuong-2017-itoa",
    title: "How to print integers really fast (with open source AppNexus code!)",
    author: "Paul Khuong",
    year: Some(2017),
    venue: "pvk.ca",
    machine: "2.4 GHz Intel Xeon E5-2630L, unloaded; C, 10 000 timed conversions per distribution, code hot",
};

pub const CHILI_TREE: Doc = Doc {
    id: "tiselice-2024-chili",
    title: "chili: Rust port of Spice, a low-overhead parallelization library (README benchmarks)",
    author: "Dragoș Tiselice",
    year: Some(2024),
    venue: "chili's README, crates.io",
    machine: "AMD Ryzen 7 4800HS (8 cores, 16 threads), each library's default pool; sum of a balanced binary tree of 1 023 nodes",
};

pub const RAYON_IDLE: Doc = Doc {
    id: "muizelaar-2019-rayon-642",
    title: "Rayon uses a lot of CPU when there's not a lot of work to do",
    author: "Jeff Muizelaar",
    year: Some(2019),
    venue: "rayon issue #642, GitHub",
    machine: "4 cores (8 hardware threads), Linux and macOS; rayon's global pool, one empty spawn per 1 ms (200 % of a CPU) or per 10 ms (30 %)",
};
