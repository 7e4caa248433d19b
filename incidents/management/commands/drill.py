"""`manage.py drill PLAYBOOK --scenario surge-10x|slow-cold-start|dead-endpoint [--json]`: practise a playbook."""
from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from incidents import drills
from incidents.models import Playbook


class Command(BaseCommand):
    help = ("Run a playbook against the sandbox with a scenario: opens a drill incident (never paged), plays the "
            "traffic on an accelerated clock, runs the playbook, keeps the timeline and prints the score.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("playbook", help="the playbook: TEAM/NAME, or its id")
        parser.add_argument("--scenario", required=True, choices=sorted(drills.SCENARIOS))
        parser.add_argument("--auto-respond", metavar="USER", default="",
                            help="act as USER (an operator of the team) at once: acknowledge, tick, run, approve. "
                                 "Without it the drill waits for people in the incident page.")
        parser.add_argument("--speed", type=float, default=10.0, help="model seconds per wall second (default 10)")
        parser.add_argument("--duration", type=float, default=600.0, help="model seconds to play (default 600)")
        parser.add_argument("--json", action="store_true", help="print the score as JSON")

    def _playbook(self, name: str) -> Playbook:
        queryset = Playbook.objects.select_related("team")
        found = queryset.filter(pk=int(name)).first() if name.isdigit() else None
        if found is None and "/" in name:
            team, _, playbook = name.partition("/")
            found = queryset.filter(team__slug=team, name=playbook).first()
        if found is None:
            raise CommandError(f"no playbook {name!r}: name it TEAM/NAME (e.g. ml-platform/surge) or by its id")
        return found

    def handle(self, *args: Any, **options: Any) -> None:
        playbook = self._playbook(options["playbook"])
        responder = None
        if options["auto_respond"]:
            responder = get_user_model().objects.filter(username=options["auto_respond"]).first()
            if responder is None:
                raise CommandError(f"--auto-respond: no user {options['auto_respond']!r}")
        if not 0.5 <= options["speed"] <= 100:
            raise CommandError("--speed must be between 0.5 and 100")
        if not 60 <= options["duration"] <= 3600:
            raise CommandError("--duration must be between 60 and 3600 model seconds")
        quiet = options["json"]

        def show(tick: dict[str, Any]) -> None:
            if not quiet:
                self.stdout.write(f"t={tick['t']:5.0f}s rate={tick['rate_rps']:5.1f} rps ready={tick['ready']:2d} "
                                  f"desired={tick['desired']:2d} queue={tick['queue_depth']:7.1f} "
                                  f"ttft_p95={tick['ttft_p95_s']:6.2f}s errors={tick['error_rate']:.2%}")

        try:
            result = drills.run_drill(playbook, options["scenario"], responder=responder, speed=options["speed"],
                                      duration_s=options["duration"], on_tick=show)
        except drills.DrillError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            # run_drill has resolved the incident ("drill interrupted") and retired the pool on its way out.
            raise CommandError("drill interrupted: its incident (if one opened) is resolved and its pool retired",
                               returncode=130) from None
        if quiet:
            self.stdout.write(json.dumps(result.score, indent=2))
            return
        score = result.score
        self.stdout.write(f"\nDrill #{result.drill.pk}: incident #{score['incident']} (kept, with its timeline)")
        for name in ("time_to_acknowledge_s", "time_to_approve_s", "time_to_ready_s", "slo_attainment",
                     "peak_ttft_p95_s", "peak_ready_replicas"):
            self.stdout.write(f"  {name}: {score[name]}")
        for step in score["steps"]:
            self.stdout.write(f"  step {step['position']} {step['title']}: {step['state']} {step['reason']}")
