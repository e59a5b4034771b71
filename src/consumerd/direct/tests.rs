use super::*;

fn entry(result: u8) -> Entry {
    Entry { files: vec![(0, [1; 32])], absent: vec![(0, 1)], day: Some("2026-12-01".into()), result: [result; 32] }
}

#[test]
fn manifests_and_digests_survive_a_save_and_a_load() {
    let t = tempfile::tempdir().unwrap();
    let files = Files::default();
    assert_eq!(files.intern(Path::new("/p/a.h")), 0);
    assert_eq!(files.intern(Path::new("/p/inc/a.h")), 1);
    files.digests().insert(
        (1, 2),
        files::Remembered { size: 3, mtime_ns: 4, ctime_ns: -5, digest: [6; 32], marks: Marks(Marks::DATE) },
    );
    let mut manifests = HashMap::new();
    manifests.insert([9; 32], Manifest { entries: vec![entry(7), entry(8)], used: 11 });
    let path = t.path().join(store::FILE_NAME);
    store::save(&path, &files, &manifests).unwrap();

    let back = Files::default();
    let loaded = store::load(&path, &back).unwrap().unwrap();
    assert_eq!(loaded[&[9; 32]].entries, vec![entry(7), entry(8)]);
    assert_eq!(loaded[&[9; 32]].used, 11);
    assert_eq!(back.path_of(1), Some(PathBuf::from("/p/inc/a.h")));
    assert_eq!(back.digests().get(&(1, 2)).map(|r| (r.ctime_ns, r.marks)), Some((-5, Marks(Marks::DATE))));

    // Every single flipped byte and every truncation is refused as a whole.
    let bytes = std::fs::read(&path).unwrap();
    for i in (0..bytes.len()).step_by(7) {
        let mut bad = bytes.clone();
        bad[i] ^= 0x5a;
        std::fs::write(&path, &bad).unwrap();
        assert!(store::load(&path, &Files::default()).is_err(), "flipped byte {i}");
    }
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    assert!(store::load(&path, &Files::default()).is_err());
    assert!(store::load(&t.path().join("none"), &Files::default()).unwrap().is_none());
}

/// Where a new file would be read instead of one the compile read: beside
/// the input, in the working directory, beside any of the unit's own files
/// (an includer's directory, searched first for `#include "..."`), and in
/// every other include directory, whatever its place in the list.
#[test]
fn shadow_candidates_are_the_other_directories_where_the_name_is_absent() {
    let t = tempfile::tempdir().unwrap();
    let d = |n: &str| t.path().join(n);
    for sub in ["src", "inc1", "inc2", "sys"] {
        std::fs::create_dir_all(d(sub)).unwrap();
    }
    std::fs::write(d("inc2/x.h"), "").unwrap();
    std::fs::write(d("inc1/y.h"), "").unwrap();
    std::fs::write(d("sys/z.h"), "").unwrap();
    let read = vec![(d("inc2/x.h"), [0; 32]), (d("sys/z.h"), [0; 32]), (d("src/local.h"), [0; 32])];
    let files = Files::default();
    let src = d("src");
    let got: Vec<PathBuf> =
        shadow_candidates(&files, now_ns(), &read, (&src, &src), &[d("inc1"), d("inc2")], &[d("sys")], &|_| false)
            .unwrap()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
    assert_eq!(got, vec![d("src/x.h"), d("inc1/x.h"), d("sys/x.h"), d("src/z.h"), d("inc2/z.h"), d("inc1/z.h")]);
    // A file under two chain directories splits both ways.
    let both = vec![(t.path().join("inc2/x.h"), [0; 32])];
    let got: Vec<PathBuf> = shadow_candidates(
        &files,
        now_ns(),
        &both,
        (&src, &src),
        &[t.path().to_owned(), d("inc1"), d("inc2")],
        &[],
        &|_| false,
    )
    .unwrap()
    .into_iter()
    .map(|(_, p)| p)
    .collect();
    assert_eq!(
        got,
        vec![
            d("src/inc2/x.h"),
            d("inc2/inc2/x.h"),
            d("inc1/inc2/x.h"),
            d("src/x.h"),
            t.path().join("x.h"),
            d("inc1/x.h")
        ]
    );
}

#[test]
fn a_stamp_may_follow_a_start_by_two_ticks_or_by_the_seconds_a_filesystem_drops() {
    const MS: i64 = 1_000_000;
    let started = 1_000_000_000_000 + 500 * MS;
    let tick = 4 * MS;
    // cmake wrote the header 19 ms before the first compile started: older
    // than two ticks of 4 ms, so its digest stands for what was read.
    assert!(!may_have_changed_after(started - 19 * MS, started, tick));
    assert!(!may_have_changed_after(started - 8 * MS - 1, started, tick));
    // Within two ticks, or after: it may have been written during the compile.
    assert!(may_have_changed_after(started - 8 * MS, started, tick));
    assert!(may_have_changed_after(started - MS, started, tick));
    assert!(may_have_changed_after(started + 300 * MS, started, tick));
    // At `HZ` 100 the window is 20 ms.
    assert!(may_have_changed_after(started - 19 * MS, started, 10 * MS));
    // A stamp with no fraction of a second: written up to 2 s later than it says.
    let whole = 1_000_000_000_000;
    assert!(may_have_changed_after(whole, started, tick));
    assert!(may_have_changed_after(whole - 1_000 * MS, started, tick));
    assert!(!may_have_changed_after(whole - 2_000 * MS, started, tick));
    assert!(!may_have_changed_after(whole - 1_000 * MS + 1, started, tick));
}

#[test]
fn a_file_written_after_the_stamp_clock_was_read_is_stamped_no_earlier() {
    // What the wrapper's start stands on, on this host's filesystem: for
    // each write, the reading taken before it is no later than its stamp.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.h");
    let tick = crate::host::file_stamp_tick_ns();
    assert!((1_000_000..=20_000_000).contains(&tick), "{tick}");
    for i in 0..2_000 {
        let started = i64::try_from(crate::host::file_stamp_clock_ns().unwrap()).unwrap();
        std::fs::write(&path, i.to_string()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::MetadataExt;
        let stamp =
            files::stamp_ns(meta.mtime(), meta.mtime_nsec()).max(files::stamp_ns(meta.ctime(), meta.ctime_nsec()));
        // (A filesystem that keeps whole seconds truncates: the window covers that.)
        if stamp % 1_000_000_000 != 0 {
            assert!(
                stamp >= started,
                "write {i}: stamped {stamp}, {} ns before the reading {started}",
                started - stamp
            );
        }
        assert!(may_have_changed_after(stamp, started, tick));
    }
}

/// A filesystem that keeps whole seconds, mounted for a test (as root) and
/// unmounted when dropped.
struct WholeSecondsMount {
    dir: tempfile::TempDir,
}

impl WholeSecondsMount {
    /// ext4 with 128-byte inodes, which have no room for nanoseconds.
    fn new() -> WholeSecondsMount {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image).unwrap().set_len(8 << 20).unwrap();
        let run = |cmd: &mut std::process::Command| {
            let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (e2fsprogs and mount are needed)"));
            assert!(out.status.success(), "{cmd:?}: {} (this test runs as root)", String::from_utf8_lossy(&out.stderr));
        };
        run(std::process::Command::new("mkfs.ext4").args(["-q", "-F", "-I", "128"]).arg(&image));
        std::fs::create_dir(dir.path().join("m")).unwrap();
        run(std::process::Command::new("mount").args(["-o", "loop"]).arg(&image).arg(dir.path().join("m")));
        WholeSecondsMount { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("m")
    }
}

impl Drop for WholeSecondsMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.path()).status();
    }
}

#[test]
fn a_file_written_during_a_compile_on_a_filesystem_of_whole_seconds_counts_as_changed() {
    let mount = WholeSecondsMount::new();
    let path = mount.path().join("conf.h");
    let files = Files::default();
    let mut earlier = 0;
    for i in 0..20 {
        let started = crate::host::file_stamp_clock_ns().unwrap();
        std::fs::write(&path, format!("#define VALUE {i}\n")).unwrap();
        let d = files.digest(&path, now_ns()).unwrap();
        assert_eq!(d.changed_ns % 1_000_000_000, 0, "not a filesystem of whole seconds");
        // Stamped before the start it followed (unless the second just began) ...
        if d.changed_ns < i64::try_from(started).unwrap() - 20_000_000 {
            earlier += 1;
        }
        // ... and still counted as changed since.
        assert!(changed_after(started)(d.changed_ns), "write {i}");
        std::thread::sleep(std::time::Duration::from_millis(37));
    }
    // The case the window is for happened (a fixed 20 ms missed each of these).
    assert!(earlier > 0);
}

/// A `-MMD` compile recorded here, through [`DirectCache::record_later`],
/// while its dependency-only run has not come (the index thread is held
/// off: its queue goes nowhere).
struct Indexing {
    dir: tempfile::TempDir,
    cache: Arc<DirectCache>,
    compiler: PathBuf,
    job: Arc<DirectJob>,
    _held: flume::Receiver<[u8; 32]>,
}

impl Indexing {
    fn compiled() -> Indexing {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("conf.h"), "#define VALUE 1\n").unwrap();
        std::fs::write(src.join("m.c"), "#include <stdio.h>\n#include \"conf.h\"\nint main(void) { return VALUE; }\n")
            .unwrap();
        // Files stamped before the compile's start, as a checkout's are.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let cache = Arc::new(DirectCache::open(&dir.path().join("cache"), 1 << 30).unwrap());
        let (tx, held) = flume::bounded(16);
        *cache.index_queue.lock().unwrap() = Some(tx);
        let path = std::env::var_os("PATH");
        let compiler = crate::cc::resolve::resolve_compiler(OsStr::new("gcc"), path.as_deref(), Path::new("/"))
            .expect("gcc is installed (the test compiles with it)");
        let args = ["-MMD", "-O2", "-c", "m.c", "-o", "m.o"];
        let job = Arc::new(DirectJob {
            cwd: src.as_os_str().as_bytes().to_vec(),
            args: args.iter().map(|a| a.as_bytes().to_vec()).collect(),
            input: src.join("m.c").as_os_str().as_bytes().to_vec(),
            dep_file: Some(src.join("m.d").as_os_str().as_bytes().to_vec()),
            deps_user_only: true,
            include_dirs: Vec::new(),
            env: Vec::new(),
            colors: false,
            cxx: false,
            started_ns: crate::host::file_stamp_clock_ns().unwrap(),
        });
        let probe = match cache.lookup(b"gcc for the test", &compiler, &job) {
            Lookup::Miss(probe) => probe,
            other => panic!("a first lookup: {other:?}"),
        };
        let out = Command::new(&compiler).args(args).current_dir(&src).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let deps = std::fs::read(src.join("m.d")).unwrap();
        let listed = crate::cc::depfile::dep_files(&deps);
        assert!(!listed.iter().any(|f| f.ends_with(b"stdio.h")), "-MMD lists no system header: {listed:?}");
        let parts = [Bytes::new(), Bytes::new(), Bytes::from(std::fs::read(src.join("m.o")).unwrap()), deps.into()];
        cache.record_later(&compiler, probe, job.clone(), listed, parts);
        Indexing { dir, cache, compiler, job, _held: held }
    }

    fn lookup(&self) -> Lookup {
        self.cache.lookup(b"gcc for the test", &self.compiler, &self.job)
    }

    fn counts(&self) -> (u64, u64, u64) {
        let c = &self.cache.counters;
        (c.hit.load(Ordering::Relaxed), c.miss.load(Ordering::Relaxed), c.recorded.load(Ordering::Relaxed))
    }
}

#[test]
fn a_lookup_of_a_unit_not_indexed_yet_indexes_it_and_hits() {
    let k = Indexing::compiled();
    assert_eq!(k.counts(), (0, 1, 0), "the first lookup missed; nothing is indexed yet");
    let sizes = k.cache.report().sizes;
    assert!(sizes.contains(&("awaiting_index".to_owned(), 1)), "{sizes:?}");
    // The index thread has not run: the lookup runs the dependency-only run.
    let Lookup::Hit([_, _, object, deps]) = k.lookup() else { panic!("a miss: {:?}", k.cache.counters) };
    let src = k.dir.path().join("src");
    assert_eq!(object, std::fs::read(src.join("m.o")).unwrap());
    assert_eq!(deps, std::fs::read(src.join("m.d")).unwrap());
    assert_eq!(k.counts(), (1, 1, 1));
    assert!(k.cache.awaiting().is_empty());
    assert_eq!(k.cache.counters.indexed_on_lookup.load(Ordering::Relaxed), 1);
    // The entry names the system headers the compile's own list left out.
    let manifests = k.cache.manifests();
    let entry = &manifests.values().next().unwrap().entries[0];
    let paths = k.cache.files.paths();
    assert!(entry.files.iter().any(|(id, _)| paths.path(*id).unwrap().ends_with(b"stdio.h")), "{entry:?}");
    drop((paths, manifests));
    // Once made, the entry answers without another run.
    assert!(matches!(k.lookup(), Lookup::Hit(_)));
    assert_eq!(k.counts(), (2, 1, 1));
}

#[test]
fn a_unit_whose_header_changed_before_it_was_indexed_misses() {
    let k = Indexing::compiled();
    std::fs::write(k.dir.path().join("src/conf.h"), "#define VALUE 2\n").unwrap();
    assert!(matches!(k.lookup(), Lookup::Miss(_)));
    assert_eq!(k.counts(), (0, 2, 0));
    assert!(k.cache.awaiting().is_empty(), "a unit that cannot be indexed waits no more");
    assert_eq!(k.cache.counters.refusals.lock().unwrap().get("a file changed while it compiled"), Some(&1));
}

#[test]
fn lookups_run_one_dependency_only_run_per_cpu_at_once() {
    let runs = Arc::new((Mutex::new(0), std::sync::Condvar::new()));
    let cpus = crate::host::online_cpus().max(1) as usize;
    let held: Vec<AskedRun<'_>> = (0..cpus).map(|_| AskedRun::begin(&runs)).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiting = {
        let runs = runs.clone();
        std::thread::spawn(move || {
            let _turn = AskedRun::begin(&runs);
            tx.send(()).unwrap();
        })
    };
    // Every CPU has its run: the next waits.
    assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err());
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("a run ended: the next one has its turn");
    waiting.join().unwrap();
    assert_eq!(*runs.0.lock().unwrap(), 0);
}

/// Flags that make the compile search system directories other than those
/// asked of the compiler without them keep the unit out of the cache.
#[test]
fn flags_that_move_the_system_include_directories_are_known() {
    for a in [
        "--sysroot=/opt/sr",
        "--sysroot",
        "-isysroot",
        "-nostdinc",
        "-nostdinc++",
        "-m32",
        "-stdlib=libc++",
        "--target=arm",
    ] {
        assert!(moves_system_dirs(a.as_bytes()), "{a}");
    }
    for a in ["-m64", "-I/usr/include", "-isystem", "-O2", "-march=native", "-mtune=generic"] {
        assert!(!moves_system_dirs(a.as_bytes()), "{a}");
    }
}
