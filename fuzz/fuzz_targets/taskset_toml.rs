//! Fuzz target: the task-set file parser never panics, and every task it accepts converts to the
//! bus form or says which task and field is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(tasks) = wcetd::taskset::parse(text) {
        for task in &tasks {
            let _ = task.to_wire();
            let _ = task.to_wire_unsized();
        }
    }
});
