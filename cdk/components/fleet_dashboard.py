"""The operator's CloudWatch dashboard: the alarms, then the graphs of
:data:`cdk.components.dashboard_widgets.ROWS`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import cast

from aws_cdk import Aws, Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk.components.dashboard_widgets import ROWS, Graph, Series, Source
from cdk.components.fleet_alarms import TABLE_OPERATIONS
from cdk.components.fleet_metrics import ONE_MINUTE, FleetMetrics

_WIDTH = 8
_HEIGHT = 6

_MetricOf = Callable[[str, str], cloudwatch.Metric]
"""A source's metric by (name, statistic), over one minute."""
_LEGEND_FIGURES = " (last ${LAST}, min ${MIN}, max ${MAX})"
"""CloudWatch's dynamic labels: each legend entry says its latest, lowest and highest value
over the time shown, not only its name."""
_EVENT_MARK = cloudwatch.HorizontalAnnotation(
    value=0.5, color="#d62728", fill=cloudwatch.Shading.ABOVE, label="any is an event"
)
"""On an events graph, everything above half an event is shaded red: a single crash or takeover
is a spike into a red band, not a dot along zero."""


class FleetDashboard(Construct):
    """One dashboard with everything the fleet's health is judged by: the alarms' states, then
    one graph widget per :class:`~cdk.components.dashboard_widgets.Graph` (a graph naming an
    alarm draws that alarm's threshold). Without Container Insights its series
    (:attr:`~cdk.components.dashboard_widgets.Source.TASKS`) are left out: they would have no
    data."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics: FleetMetrics,
        api: apigw.RestApi,
        functions: Mapping[str, lambda_.IFunction],
        queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        table: dynamodb.ITableV2,
        sink_stream: kinesis.IStream,
        alarms: Mapping[str, cloudwatch.Alarm],
    ) -> None:
        super().__init__(scope, construct_id)
        self._functions = functions
        self._table = table
        self._alarms = alarms

        def aws(metric: Callable[..., cloudwatch.Metric]) -> _MetricOf:
            return lambda name, statistic: metric(name, statistic=statistic, period=ONE_MINUTE)

        self._sources: dict[Source, _MetricOf] = {
            Source.AUDITOR: lambda name, stat: metrics.auditor(name, statistic=stat),
            Source.WORKER: lambda name, stat: metrics.worker(name, statistic=stat),
            Source.REAPER: lambda name, stat: metrics.reaper(name, statistic=stat),
            Source.SERVICE: lambda name, stat: metrics.service(name, statistic=stat),
            Source.SINK: aws(sink_stream.metric),
            Source.API: aws(api.metric),
            Source.QUEUE: aws(queue.metric),
            Source.DEAD_LETTERS: aws(dead_letter_queue.metric),
            Source.TABLE: aws(table.metric),
        }
        if metrics.container_insights_on:
            self._sources[Source.TASKS] = lambda name, stat: metrics.container_insights(
                name, statistic=stat
            )
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=list(alarms.values()), width=24, height=3
            )
        )
        for row in ROWS:
            self.dashboard.add_widgets(*(self._widget(graph) for graph in row))
        self.url = (
            f"https://{Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region={Aws.REGION}"
            f"#dashboards:name={self.dashboard.dashboard_name}"
        )

    def _widget(self, graph: Graph) -> cloudwatch.GraphWidget:
        left = [m for series in graph.left for m in self._metrics(series)]
        if graph.per_second:
            left = [
                cloudwatch.MathExpression(
                    expression="m / PERIOD(m)",
                    using_metrics={"m": metric},
                    label=(series.label or series.metric) + _LEGEND_FIGURES,
                    period=ONE_MINUTE,
                )
                for series, metric in zip(graph.left, left, strict=True)
            ]
        annotations = [self._alarms[graph.alarm].to_annotation()] if graph.alarm else []
        if graph.events:
            annotations.append(_EVENT_MARK)
        return cloudwatch.GraphWidget(
            title=graph.title,
            left=left,
            right=[m for series in graph.right for m in self._metrics(series)],
            left_annotations=annotations or None,
            left_y_axis=cloudwatch.YAxisProps(min=0) if graph.events else None,
            legend_position=cloudwatch.LegendPosition.BOTTOM,
            width=_WIDTH,
            height=_HEIGHT,
        )

    def _metrics(self, series: Series) -> Sequence[cloudwatch.IMetric]:
        """The CloudWatch metrics of one series (one per function for ``FUNCTIONS``)."""
        if series.source is Source.FUNCTIONS:
            return [
                fn.metric(
                    series.metric,
                    statistic=series.statistic,
                    period=ONE_MINUTE,
                    label=name + _LEGEND_FIGURES,
                )
                for name, fn in self._functions.items()
            ]
        if series.source is Source.TABLE and series.metric == "ThrottledRequests":
            # Reported per operation only: summed over the ones streamlease performs.
            summed = self._table.metric_throttled_requests_for_operations(
                operations=list(TABLE_OPERATIONS), period=ONE_MINUTE
            )
            label = (series.label or series.metric) + _LEGEND_FIGURES
            return [cast(cloudwatch.MathExpression, summed).with_(label=label)]
        if any(source not in self._sources for source, _ in series.parts):
            return []  # Container Insights off
        label = (series.label or series.metric) + _LEGEND_FIGURES
        if series.plus:
            # Ids unique in a graph that draws several sums: named for the metric.
            parts = {
                f"{source.value}_{name}".lower().replace("-", "_"): self._sources[source](
                    name, series.statistic
                )
                for source, name in series.parts
            }
            return [
                cloudwatch.MathExpression(
                    expression=" + ".join(f"FILL({m}, 0)" for m in parts),
                    using_metrics=parts,
                    label=label,
                    period=ONE_MINUTE,
                )
            ]
        metric = self._sources[series.source](series.metric, series.statistic)
        return [metric.with_(label=label)]
