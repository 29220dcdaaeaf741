//! The enums of `crate::states` as column types: each reads from a text column, and a text it
//! does not know is a decode error naming the kind and the text (sqlx reports it with the
//! column's name). Written as `Decode` rather than `#[sqlx(try_from)]`, whose errors sqlx 0.9
//! reports as "unprintable error".

use sqlx::Database;
use sqlx::error::BoxDynError;

use crate::states::{
    AttemptState, BackfillState, JobKind, JobState, RunState, StepState, TaskState, TriggerKind,
};

/// Implements `Type` and `Decode` as `String`'s followed by `FromStr`: only boilerplate.
macro_rules! text_column {
    ($($name:ty),+ $(,)?) => {$(
        impl<DB: Database> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: Database> sqlx::Decode<'r, DB> for $name
        where
            String: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
                let text = <String as sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<$name>()?)
            }
        }
    )+};
}

text_column!(
    AttemptState,
    BackfillState,
    JobKind,
    JobState,
    RunState,
    StepState,
    TaskState,
    TriggerKind,
);
