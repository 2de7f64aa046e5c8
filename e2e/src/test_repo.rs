//! A work tree whose `origin` is a bare repository served by the git server.
//! Every operation runs the git CLI with the user's global and system config
//! ignored.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::run_cmd;

/// `git -C dir` with an isolated configuration and no prompts.
pub(crate) fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    cmd
}

/// A test repository: a bare repository served by [`crate::GitServer`] and a
/// work tree to change it. Pushes go to the bare repository on disk.
#[derive(Clone, Debug)]
pub struct TestRepo {
    name: String,
    work: PathBuf,
    bare: PathBuf,
}

impl TestRepo {
    pub(crate) fn new(name: String, work: PathBuf, bare: PathBuf) -> Self {
        TestRepo { name, work, bare }
    }

    /// Unique repository name; pass it to the `GitServer::*_url` methods.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The work tree.
    pub fn path(&self) -> &Path {
        &self.work
    }

    /// The bare repository the server serves.
    pub fn bare_path(&self) -> &Path {
        &self.bare
    }

    fn file_path(&self, path: &str) -> anyhow::Result<PathBuf> {
        let rel = Path::new(path);
        if path.is_empty()
            || rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
            || rel.components().next() == Some(Component::Normal(".git".as_ref()))
        {
            bail!("invalid repository path {path:?}");
        }
        Ok(self.work.join(rel))
    }

    /// Runs `git <args>` in the work tree and returns its stdout.
    pub fn git(&self, args: &[&str]) -> anyhow::Result<String> {
        run_cmd(git_command(&self.work).args(args))
    }

    /// Writes a file (creating parent directories) in the work tree.
    pub fn write(&self, path: &str, contents: &str) -> anyhow::Result<()> {
        let file = self.file_path(path)?;
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, contents).with_context(|| format!("writing {}", file.display()))
    }

    /// Removes a file or a directory tree from the work tree.
    pub fn remove(&self, path: &str) -> anyhow::Result<()> {
        let file = self.file_path(path)?;
        if file.is_dir() {
            std::fs::remove_dir_all(&file)
        } else {
            std::fs::remove_file(&file)
        }
        .with_context(|| format!("removing {}", file.display()))
    }

    /// Stages everything and commits (empty commits allowed); returns the sha.
    pub fn commit(&self, msg: &str) -> anyhow::Result<String> {
        self.git(&["add", "-A"])?;
        self.git(&["commit", "-q", "--allow-empty", "-m", msg])?;
        self.head()
    }

    /// Pushes HEAD to `refs/heads/<branch>`.
    pub fn push(&self, branch: &str) -> anyhow::Result<()> {
        self.git(&["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")])?;
        Ok(())
    }

    /// Force-pushes HEAD to `refs/heads/<branch>`.
    pub fn force_push(&self, branch: &str) -> anyhow::Result<()> {
        self.git(&[
            "push",
            "-q",
            "--force",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ])?;
        Ok(())
    }

    /// Tags HEAD (annotated tags get the name as message); moves an existing tag.
    pub fn tag(&self, name: &str, annotated: bool) -> anyhow::Result<()> {
        if annotated {
            self.git(&["tag", "-f", "-a", "-m", name, name])?;
        } else {
            self.git(&["tag", "-f", name])?;
        }
        Ok(())
    }

    /// Pushes all tags (forced, so moved tags are updated).
    pub fn push_tags(&self) -> anyhow::Result<()> {
        self.git(&["push", "-q", "--force", "origin", "--tags"])?;
        Ok(())
    }

    /// `git reset --hard <rev>` in the work tree.
    pub fn reset_hard(&self, rev: &str) -> anyhow::Result<()> {
        self.git(&["reset", "-q", "--hard", rev])?;
        Ok(())
    }

    /// Switches the work tree to `branch`, creating it at HEAD when missing.
    pub fn checkout(&self, branch: &str) -> anyhow::Result<()> {
        self.git(&["checkout", "-q", "-B", branch])?;
        Ok(())
    }

    /// Deletes `refs/heads/<branch>` on the server.
    pub fn delete_remote_branch(&self, branch: &str) -> anyhow::Result<()> {
        self.git(&[
            "push",
            "-q",
            "origin",
            "--delete",
            &format!("refs/heads/{branch}"),
        ])?;
        Ok(())
    }

    /// The sha of HEAD in the work tree.
    pub fn head(&self) -> anyhow::Result<String> {
        Ok(self.git(&["rev-parse", "HEAD"])?.trim().to_string())
    }

    /// The sha a ref points to on the server (bare repository), e.g.
    /// `refs/heads/main` or `refs/tags/v1^{commit}`.
    pub fn remote_rev(&self, rev: &str) -> anyhow::Result<String> {
        Ok(
            run_cmd(git_command(&self.bare).args(["rev-parse", "--verify", rev]))?
                .trim()
                .to_string(),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn repo(dir: &Path) -> TestRepo {
        let bare = dir.join("r.git");
        let work = dir.join("w");
        run_cmd(
            git_command(dir)
                .args(["init", "-q", "--bare", "-b", "main"])
                .arg(&bare),
        )
        .unwrap();
        std::fs::create_dir_all(&work).unwrap();
        run_cmd(git_command(&work).args(["init", "-q", "-b", "main"])).unwrap();
        run_cmd(git_command(&work).args(["config", "user.name", "t"])).unwrap();
        run_cmd(git_command(&work).args(["config", "user.email", "t@t"])).unwrap();
        run_cmd(
            git_command(&work)
                .args(["remote", "add", "origin"])
                .arg(&bare),
        )
        .unwrap();
        TestRepo::new("r".into(), work, bare)
    }

    #[test]
    fn commit_push_tag_reset_delete() {
        let dir = tempfile::tempdir().unwrap();
        let r = repo(dir.path());
        r.write("a/b.yaml", "x: 1\n").unwrap();
        let first = r.commit("first").unwrap();
        r.push("main").unwrap();
        assert_eq!(r.remote_rev("refs/heads/main").unwrap(), first);
        r.write("a/b.yaml", "x: 2\n").unwrap();
        let second = r.commit("second").unwrap();
        assert_ne!(first, second);
        r.tag("v1", true).unwrap();
        r.tag("light", false).unwrap();
        r.push_tags().unwrap();
        assert_eq!(r.remote_rev("refs/tags/v1^{commit}").unwrap(), second);
        assert_ne!(
            r.remote_rev("refs/tags/v1").unwrap(),
            second,
            "annotated tag object"
        );
        assert_eq!(r.remote_rev("refs/tags/light").unwrap(), second);
        r.push("dev").unwrap();
        r.reset_hard(&first).unwrap();
        assert_eq!(
            std::fs::read_to_string(r.path().join("a/b.yaml")).unwrap(),
            "x: 1\n"
        );
        assert!(
            r.push("dev").is_err(),
            "non-fast-forward push must be refused"
        );
        r.force_push("dev").unwrap();
        assert_eq!(r.remote_rev("refs/heads/dev").unwrap(), first);
        r.delete_remote_branch("dev").unwrap();
        assert!(r.remote_rev("refs/heads/dev").is_err());
        r.remove("a").unwrap();
        r.commit("rm").unwrap();
        assert!(r.git(&["ls-files"]).unwrap().trim().is_empty());
    }

    #[test]
    fn paths_must_stay_inside_the_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let r = repo(dir.path());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".git/config"] {
            assert!(r.write(bad, "x").is_err(), "{bad}");
        }
    }
}
