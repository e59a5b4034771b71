//! Arbitrary compiler command lines through the consumerd's classifier and,
//! for whatever it would send remote, the agent's allow-list and command
//! builder: never a panic, and nothing the classifier sends is refused by
//! the agent for a reason the classifier should have caught.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use ccroute::cc::{self, Classification, Family};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let args: Vec<OsString> = rest.split(|&b| b == 0).map(|a| OsString::from_vec(a.to_vec())).collect();
    let family = if mode & 1 == 0 { Family::Gnu } else { Family::Clang };
    let env = |name: &str| if mode & 2 != 0 && name == "SOURCE_DATE_EPOCH" { Some(OsString::from("1")) } else { None };
    if let Classification::Remote(plan) = cc::classify(family, &args, Path::new("/home/dev/project"), env) {
        let _ = plan.postprocess(rest);
        if cc::validate(&plan.spec).is_ok() {
            let _ = cc::agent_command(&plan.spec, Path::new("/usr/bin/gcc"), Path::new("/tmp/scratch"));
        }
    }
    // The agent sees specs from the network, not only from the classifier.
    let spec = ccroute_wire::TaskSpec {
        args: rest.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect(),
        input_path: String::from_utf8_lossy(rest).into_owned(),
        cwd: (mode & 4 != 0).then(|| "/home/u/p".to_string()),
        env: if mode & 8 != 0 { vec![("LANG".into(), String::from_utf8_lossy(rest).into_owned())] } else { vec![] },
        // A unit sent as its inputs: paths from the same bytes.
        inputs: (mode & 16 != 0).then(|| {
            let paths: Vec<String> =
                rest.split(|&b| b == b'\n').map(|p| String::from_utf8_lossy(p).into_owned()).collect();
            ccroute_wire::Inputs {
                toolchain: ccroute_wire::ToolchainKey(1),
                driver: paths.first().cloned().unwrap_or_default(),
                files: paths
                    .iter()
                    .map(|p| ccroute_wire::InputFile { path: p.clone(), digest: [0; 32], size: p.len() as u64 })
                    .collect(),
                dirs: paths.iter().rev().cloned().collect(),
            }
        }),
    };
    if cc::validate(&spec).is_ok() {
        let _ = cc::agent_command(&spec, Path::new("/usr/bin/gcc"), Path::new("/tmp/scratch"));
    }
    let _ = cc::validate_inputs(&spec);
});
