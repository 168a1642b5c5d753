//! The errors of the rings and channels, declared once and named by each module after its own
//! verbs: [`spsc`](crate::spsc) pushes and pops (`TryPushError`, `PushError`, … as in rtrb),
//! [`mpmc`](crate::mpmc) sends and receives (`TrySendError`, `SendError`, … as in
//! crossbeam-channel and std). Every error that gives up on putting a value in hands it back;
//! `Debug` does not need `T: Debug`, as std's and crossbeam's channel errors do not.

/// Declares the six error types of a ring or channel in the calling module, under the names
/// given: a non-blocking put, a put with a deadline, a blocking put; the same three for taking.
macro_rules! errors {
    (
        put: $Try:ident, $Timeout:ident, $Put:ident, $put:literal;
        take: $TryTake:ident, $TakeTimeout:ident, $Take:ident, $take:literal;
    ) => {
        #[doc = concat!("A non-blocking ", $put, " failed; the value is handed back.")]
        #[derive(Clone, Copy, PartialEq, Eq)]
        pub enum $Try<T> {
            /// No free slot.
            Full(T),
            /// Nobody will ever take it: the receiving side is gone.
            Disconnected(T),
        }

        #[doc = concat!("A ", $put, " with a deadline failed; the value is handed back.")]
        #[derive(Clone, Copy, PartialEq, Eq)]
        pub enum $Timeout<T> {
            /// The deadline passed with no free slot.
            Timeout(T),
            /// Nobody will ever take it: the receiving side is gone.
            Disconnected(T),
        }

        #[doc = concat!(
                            "A blocking ", $put,
                            " failed because the receiving side is gone; the value is handed back."
                        )]
        #[derive(Clone, Copy, PartialEq, Eq)]
        pub struct $Put<T>(pub T);

        #[doc = concat!("A non-blocking ", $take, " found nothing.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $TryTake {
            /// Nothing to take now.
            Empty,
            /// Nothing to take ever again: the sending side is gone and every item was taken.
            Disconnected,
        }

        #[doc = concat!("A ", $take, " with a deadline found nothing.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $TakeTimeout {
            /// The deadline passed with nothing to take.
            Timeout,
            /// Nothing to take ever again: the sending side is gone and every item was taken.
            Disconnected,
        }

        #[doc = concat!(
                            "A blocking ", $take,
                            " failed: the sending side is gone and every item was taken."
                        )]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $Take;

        impl<T> $Try<T> {
            /// The value handed back.
            pub fn into_inner(self) -> T {
                match self {
                    $Try::Full(v) | $Try::Disconnected(v) => v,
                }
            }

            /// Whether it failed for want of a free slot.
            pub fn is_full(&self) -> bool {
                matches!(self, $Try::Full(_))
            }

            /// Whether it failed because the receiving side is gone.
            pub fn is_disconnected(&self) -> bool {
                matches!(self, $Try::Disconnected(_))
            }
        }

        impl<T> $Timeout<T> {
            /// The value handed back.
            pub fn into_inner(self) -> T {
                match self {
                    $Timeout::Timeout(v) | $Timeout::Disconnected(v) => v,
                }
            }

            /// Whether the deadline passed.
            pub fn is_timeout(&self) -> bool {
                matches!(self, $Timeout::Timeout(_))
            }

            /// Whether it failed because the receiving side is gone.
            pub fn is_disconnected(&self) -> bool {
                matches!(self, $Timeout::Disconnected(_))
            }
        }

        impl<T> $Put<T> {
            /// The value handed back.
            pub fn into_inner(self) -> T {
                self.0
            }
        }

        impl<T> ::std::fmt::Debug for $Try<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $Try::Full(_) => "Full(..)",
                    $Try::Disconnected(_) => "Disconnected(..)",
                })
            }
        }

        impl<T> ::std::fmt::Debug for $Timeout<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $Timeout::Timeout(_) => "Timeout(..)",
                    $Timeout::Disconnected(_) => "Disconnected(..)",
                })
            }
        }

        impl<T> ::std::fmt::Debug for $Put<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(concat!(stringify!($Put), "(..)"))
            }
        }

        impl<T> ::std::fmt::Display for $Try<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $Try::Full(_) => "no free slot",
                    $Try::Disconnected(_) => "the receiving side is gone",
                })
            }
        }

        impl<T> ::std::fmt::Display for $Timeout<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $Timeout::Timeout(_) => "timed out waiting for a free slot",
                    $Timeout::Disconnected(_) => "the receiving side is gone",
                })
            }
        }

        impl<T> ::std::fmt::Display for $Put<T> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str("the receiving side is gone")
            }
        }

        impl ::std::fmt::Display for $TryTake {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $TryTake::Empty => "nothing to take",
                    $TryTake::Disconnected => "nothing to take, and the sending side is gone",
                })
            }
        }

        impl ::std::fmt::Display for $TakeTimeout {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self {
                    $TakeTimeout::Timeout => "timed out waiting for an item",
                    $TakeTimeout::Disconnected => "nothing to take, and the sending side is gone",
                })
            }
        }

        impl ::std::fmt::Display for $Take {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str("nothing to take, and the sending side is gone")
            }
        }

        impl<T> ::std::error::Error for $Try<T> {}
        impl<T> ::std::error::Error for $Timeout<T> {}
        impl<T> ::std::error::Error for $Put<T> {}
        impl ::std::error::Error for $TryTake {}
        impl ::std::error::Error for $TakeTimeout {}
        impl ::std::error::Error for $Take {}
    };
}

pub(crate) use errors;
