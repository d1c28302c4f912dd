"""Per-language leaderboards read back from MLflow.

collect (runs -> records), tables (boards: means over seeds, complete-set averages, ranks), stats (ranks with ties,
bootstrap, paired Wilcoxon), slices (script, seen/unseen, resource level, label source), papers (published figures
on glot500 runs), render_terminal / render_markdown / render_csv / render_html, publish (files + the MLflow
leaderboard run; ``harness leaderboard``).
"""
