from django import template

from incidents.messages import slack_escape

register = template.Library()


@register.filter
def mrkdwn(value: object) -> str:
    """Escape text for Slack's mrkdwn (templates under incidents/slack/ render without HTML escaping)."""
    return slack_escape(str(value))
